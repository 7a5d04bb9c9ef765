package node

import (
	"context"

	"github.com/intellect-node/intellect-node/p2p"
)

// limitedTransport caps the send rate of an all-reduce transport. It keeps
// the transport's Abort, so neighbours still learn why an attempt ended.
type limitedTransport struct {
	*p2p.RingTransport
	l *p2p.Limiter
}

func (t limitedTransport) Send(ctx context.Context, shard int, msg []byte) error {
	if err := t.l.Wait(ctx, len(msg)); err != nil {
		return err
	}
	return t.RingTransport.Send(ctx, shard, msg)
}

// newSendLimiter returns the limiter of --max-send-rate: a burst of 100 ms
// of traffic, at least 64 KiB. (A larger message just waits longer.)
func newSendLimiter(rate float64) *p2p.Limiter {
	return p2p.NewLimiter(int64(rate), max(int64(rate/10), 64<<10))
}
