package wan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// echoSize is the size of one RTT probe message.
const echoSize = 64

// RTT measures count round trips of a small message over one TCP connection
// from host a to an echo server on host b, and returns them sorted. The
// first exchange (connection set-up) is not counted.
func (n *Net) RTT(ctx context.Context, a, b, count int) ([]time.Duration, error) {
	l, err := n.Listen(b, "tcp", net.JoinHostPort(n.Hosts[b].Addr.String(), "0"))
	if err != nil {
		return nil, err
	}
	defer l.Close()
	go serveEcho(l)
	c, err := n.Dial(ctx, a, "tcp", l.Addr().String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stopOnDone(ctx, c)
	buf := make([]byte, echoSize)
	samples := make([]time.Duration, 0, count)
	for k := 0; k <= count; k++ {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			return nil, fmt.Errorf("wan: rtt write: %w", err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, fmt.Errorf("wan: rtt read: %w", err)
		}
		if k > 0 {
			samples = append(samples, time.Since(start))
		}
	}
	slices.Sort(samples)
	return samples, nil
}

// serveEcho echoes the first connection of l back to its sender.
func serveEcho(l net.Listener) {
	c, err := l.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	io.Copy(c, c)
}

// stopOnDone closes c when ctx is done, so that blocked I/O returns.
func stopOnDone(ctx context.Context, c io.Closer) {
	context.AfterFunc(ctx, func() { c.Close() })
}

// Transfer is the result of one bulk TCP transfer.
type Transfer struct {
	// Bytes is how much arrived.
	Bytes int64
	// Total is from the start of the connect to the last byte's arrival.
	Total time.Duration
	// SecondHalf is the time the second half of the bytes took to arrive:
	// the steady rate, after slow start.
	SecondHalf time.Duration
}

// Rate is the goodput over the whole transfer in bytes per second.
func (t Transfer) Rate() float64 { return float64(t.Bytes) / t.Total.Seconds() }

// SteadyRate is the goodput of the second half in bytes per second.
func (t Transfer) SteadyRate() float64 { return float64(t.Bytes/2) / t.SecondHalf.Seconds() }

// ErrShortTransfer means fewer bytes arrived than were sent.
var ErrShortTransfer = errors.New("wan: transfer arrived short")

// Bulk sends size bytes over one TCP connection from host a to host b, the
// way iperf does, and reports the goodput seen by the receiver.
func (n *Net) Bulk(ctx context.Context, a, b int, size int64) (Transfer, error) {
	l, err := n.Listen(b, "tcp", net.JoinHostPort(n.Hosts[b].Addr.String(), "0"))
	if err != nil {
		return Transfer{}, err
	}
	defer l.Close()
	got := make(chan sinkResult, 1)
	go func() { got <- sink(l, size) }()
	start := time.Now()
	c, err := n.Dial(ctx, a, "tcp", l.Addr().String())
	if err != nil {
		return Transfer{}, err
	}
	defer c.Close()
	stopOnDone(ctx, c)
	if err := send(c, size); err != nil {
		return Transfer{}, err
	}
	r := <-got
	if r.err != nil {
		return Transfer{}, r.err
	}
	if r.bytes != size {
		return Transfer{}, fmt.Errorf("%w: %d of %d bytes", ErrShortTransfer, r.bytes, size)
	}
	return Transfer{Bytes: r.bytes, Total: r.end.Sub(start), SecondHalf: r.end.Sub(r.half)}, nil
}

// send writes size bytes to c and half-closes it.
func send(c net.Conn, size int64) error {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for left := size; left > 0; {
		k, err := c.Write(buf[:min(left, int64(len(buf)))])
		if err != nil {
			return fmt.Errorf("wan: bulk send: %w", err)
		}
		left -= int64(k)
	}
	return c.(*net.TCPConn).CloseWrite()
}

type sinkResult struct {
	bytes     int64
	half, end time.Time
	err       error
}

// sink accepts one connection on l and reads it to the end, noting when half
// of want bytes had arrived.
func sink(l net.Listener, want int64) sinkResult {
	c, err := l.Accept()
	if err != nil {
		return sinkResult{err: fmt.Errorf("wan: bulk accept: %w", err)}
	}
	defer c.Close()
	buf := make([]byte, 1<<18)
	var r sinkResult
	for {
		k, err := c.Read(buf)
		r.bytes += int64(k)
		if r.half.IsZero() && r.bytes >= want/2 {
			r.half = time.Now()
		}
		if err == io.EOF {
			r.end = time.Now()
			return r
		}
		if err != nil {
			r.err = fmt.Errorf("wan: bulk receive: %w", err)
			return r
		}
	}
}

// wireSample is how often WireRate reads the link's counters.
const wireSample = 2 * time.Millisecond

// WireRate sends size bytes over TCP from host a to host b and returns the
// rate in bytes per second at which the emulated link a→b delivered packets
// (headers included) between a quarter and three quarters of the transfer,
// read from the forwarder's counters. Unlike goodput timed at the receiver,
// it is not skewed by the bursts in which TCP releases data held back by a
// retransmission, so it shows what the link itself carries.
func (n *Net) WireRate(ctx context.Context, a, b int, size int64) (float64, error) {
	from, to := n.Hosts[a].Name, n.Hosts[b].Name
	linkBytes := func() uint64 {
		l, _ := n.fwd.Stats().Link(from, to)
		return l.Bytes
	}
	start := linkBytes()
	done := make(chan error, 1)
	go func() {
		_, err := n.Bulk(ctx, a, b, size)
		done <- err
	}()
	tick := time.NewTicker(wireSample)
	defer tick.Stop()
	var t1 time.Time
	var b1 uint64
	for {
		select {
		case err := <-done:
			if err == nil {
				err = fmt.Errorf("%w: transfer ended before three quarters were seen", ErrShortTransfer)
			}
			return 0, err
		case now := <-tick.C:
			got := linkBytes() - start
			switch {
			case t1.IsZero() && got >= uint64(size/4):
				t1, b1 = now, got
			case !t1.IsZero() && got >= uint64(3*size/4):
				rate := float64(got-b1) / now.Sub(t1).Seconds()
				return rate, <-done
			}
		}
	}
}
