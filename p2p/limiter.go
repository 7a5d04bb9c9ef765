package p2p

import (
	"context"
	"sync"
	"time"
)

// Limiter is a token bucket of bytes shared by goroutines: rate bytes per
// second, holding at most burst bytes. It caps a checkpoint donor's serving
// rate and the all-reduce's send rate (node's --max-send-rate). Takers
// reserve tokens and may drive the balance negative; each then waits until
// its debt is repaid, so concurrent takers are served in the order they
// reserved and the long-run rate never exceeds rate.
type Limiter struct {
	rate  float64 // bytes per second, > 0
	burst float64 // bytes, ≥ the largest single reservation
	now   func() time.Time

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewLimiter returns a full Limiter of rate bytes per second (> 0) and burst
// bytes (≥ the largest single Wait).
func NewLimiter(rate, burst int64) *Limiter { return newLimiter(rate, burst, time.Now) }

// newLimiter is NewLimiter with an injected clock.
func newLimiter(rate, burst int64, now func() time.Time) *Limiter {
	return &Limiter{rate: float64(rate), burst: float64(burst), now: now, tokens: float64(burst), last: now()}
}

// reserve takes n tokens and returns how long the caller must wait before
// sending them.
func (b *Limiter) reserve(n int) time.Duration {
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

// SetRate changes the rate to rate bytes per second (> 0) from now on:
// tokens earned so far are counted at the old rate; debts already reserved
// keep the waits computed for them.
func (b *Limiter) SetRate(rate float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(b.burst, b.tokens+el*b.rate)
	}
	b.last, b.rate = now, rate
}

// Wait reserves n tokens and sleeps until they are paid for, or ctx ends.
func (b *Limiter) Wait(ctx context.Context, n int) error {
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

// NewSendLimiter returns the limiter of a send rate of bytesPerSec (> 0),
// for RingSpec.SendRate (node's --max-send-rate): a burst of 100 ms of
// traffic, at least 64 KiB. A message larger than the burst just waits
// longer.
func NewSendLimiter(bytesPerSec float64) *Limiter {
	return NewLimiter(int64(bytesPerSec), max(int64(bytesPerSec/10), 64<<10))
}
