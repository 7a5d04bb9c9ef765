package node

import (
	"context"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/p2p"
)

// bucket is a token bucket of bytes per second, shared by goroutines.
type bucket struct {
	mu     sync.Mutex
	rate   float64 // bytes per second
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate float64) *bucket {
	burst := rate / 10 // 100 ms worth
	if burst < 64<<10 {
		burst = 64 << 10
	}
	return &bucket{rate: rate, burst: burst, tokens: burst, last: time.Now()}
}

// wait blocks until n bytes may be sent or ctx ends.
func (b *bucket) wait(ctx context.Context, n int) error {
	b.mu.Lock()
	now := time.Now()
	b.tokens += now.Sub(b.last).Seconds() * b.rate
	if b.tokens > b.burst {
		b.tokens = b.burst
	}
	b.last = now
	b.tokens -= float64(n)
	var d time.Duration
	if b.tokens < 0 {
		d = time.Duration(-b.tokens / b.rate * float64(time.Second))
	}
	b.mu.Unlock()
	if d == 0 {
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

// limitedTransport caps the send rate of an all-reduce transport. It keeps
// the transport's Abort, so neighbours still learn why an attempt ended.
type limitedTransport struct {
	*p2p.RingTransport
	b *bucket
}

func (l limitedTransport) Send(ctx context.Context, shard int, msg []byte) error {
	if err := l.b.wait(ctx, len(msg)); err != nil {
		return err
	}
	return l.RingTransport.Send(ctx, shard, msg)
}
