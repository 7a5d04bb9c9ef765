package emu

// Bucket is a token bucket shaper with a drop-tail queue in front of it,
// written as a generic cell rate algorithm (GCRA) so that it needs no timer:
// Admit computes when a packet leaves the bottleneck instead of waiting for it.
//
// Tokens fill at Rate bytes per second up to Burst bytes. A packet of n bytes
// leaves as soon as n tokens are there, in arrival order; packets that cannot
// leave yet wait in the queue. A packet that would make the queue hold more
// than Queue bytes is dropped (drop-tail). The zero Bucket with Rate 0 passes
// everything at once.
//
// A Bucket is not safe for concurrent use.
type Bucket struct {
	// Rate is the link rate in bytes per second; 0 means unlimited.
	Rate float64
	// Burst is the bucket depth in bytes: how much may leave back to back
	// after an idle period. Values below one packet act as one packet.
	Burst int
	// Queue is the drop-tail limit in bytes of packets waiting for tokens;
	// 0 means no queue (a packet that cannot leave at once is dropped).
	Queue int

	tat int64 // theoretical arrival time (ns): when the bucket is full again
}

// Admit offers a packet of size bytes at time now (ns, non-decreasing across
// calls). It returns the time the packet leaves the bottleneck and true, or
// false if the drop-tail queue is full; a dropped packet takes no tokens.
func (b *Bucket) Admit(now int64, size int) (depart int64, ok bool) {
	if b.Rate <= 0 {
		return now, true
	}
	tat := max(b.tat, now)
	txTime := b.nanos(size)
	depart = max(now, tat+txTime-b.nanos(max(b.Burst, size)))
	if b.backlog(now, depart) > b.Queue {
		return 0, false
	}
	b.tat = tat + txTime
	return depart, true
}

// Backlog is the number of bytes queued at time now, waiting for tokens.
func (b *Bucket) Backlog(now int64) int {
	if b.Rate <= 0 {
		return 0
	}
	return b.backlog(now, b.tat-b.nanos(b.Burst))
}

// TxTime is the time in ns the link takes to put size bytes on the wire
// (0 for an unlimited link). A packet has fully arrived at the far end
// TxTime after it departs, plus the propagation delay.
func (b *Bucket) TxTime(size int) int64 {
	if b.Rate <= 0 {
		return 0
	}
	return b.nanos(size)
}

// backlog converts the wait until depart into bytes at the link rate.
func (b *Bucket) backlog(now, depart int64) int {
	if depart <= now {
		return 0
	}
	return int(float64(depart-now) * b.Rate / 1e9)
}

// nanos is the time in ns the link takes to send n bytes.
func (b *Bucket) nanos(n int) int64 {
	return int64(float64(n) * 1e9 / b.Rate)
}
