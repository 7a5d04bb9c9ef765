package p2p

import (
	"context"
	"sync"
	"time"
)

// ckptBucket is a token bucket shared by all transfers of one donor: rate
// bytes per second, holding at most burst bytes. Takers reserve tokens and
// may drive the balance negative; each then waits until its debt is repaid,
// so concurrent takers are served in the order they reserved and the long
// run rate never exceeds rate.
type ckptBucket struct {
	rate  float64 // bytes per second, > 0
	burst float64 // bytes, ≥ the largest single reservation
	now   func() time.Time

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// newCkptBucket returns a full bucket.
func newCkptBucket(rate, burst int64, now func() time.Time) *ckptBucket {
	return &ckptBucket{rate: float64(rate), burst: float64(burst), now: now, tokens: float64(burst), last: now()}
}

// reserve takes n tokens and returns how long the caller must wait before
// sending them.
func (b *ckptBucket) reserve(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(b.burst, b.tokens+el*b.rate)
	}
	b.last = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// wait reserves n tokens and sleeps until they are paid for, or ctx ends.
func (b *ckptBucket) wait(ctx context.Context, n int) error {
	d := b.reserve(n)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
