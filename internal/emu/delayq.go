package emu

// DelayQueue holds packets in flight on one link until their due time. Due
// times on a link never decrease (the bucket releases packets in order and
// the delay is the same for all of them), so the queue is a FIFO ring rather
// than a heap: Push clamps a due time that would overtake the packet before
// it, which keeps delivery in order even when the link's delay is lowered
// while packets are in flight.
//
// A DelayQueue is not safe for concurrent use; Forwarder guards it.
type DelayQueue struct {
	buf        []queued // ring storage, len is a power of two
	head, size int
	last       int64 // due time of the newest packet
	bytes      int   // bytes of all queued packets
}

// queued is one packet and the time (ns) it is due at the far end.
type queued struct {
	due int64
	pkt []byte
}

// Push appends pkt, due at time due (ns), and returns the due time used,
// which is never earlier than that of the packet pushed before it.
func (q *DelayQueue) Push(due int64, pkt []byte) int64 {
	if q.size == len(q.buf) {
		q.grow()
	}
	due = max(due, q.last)
	q.last = due
	q.buf[(q.head+q.size)&(len(q.buf)-1)] = queued{due: due, pkt: pkt}
	q.size++
	q.bytes += len(pkt)
	return due
}

// Next returns the due time of the oldest packet and true, or false if the
// queue is empty.
func (q *DelayQueue) Next() (int64, bool) {
	if q.size == 0 {
		return 0, false
	}
	return q.buf[q.head].due, true
}

// PopDue appends to dst every packet due at or before now, oldest first,
// removes them from the queue and returns dst.
func (q *DelayQueue) PopDue(now int64, dst [][]byte) [][]byte {
	for q.size > 0 && q.buf[q.head].due <= now {
		e := &q.buf[q.head]
		dst = append(dst, e.pkt)
		q.bytes -= len(e.pkt)
		*e = queued{}
		q.head = (q.head + 1) & (len(q.buf) - 1)
		q.size--
	}
	return dst
}

// Len is the number of packets queued.
func (q *DelayQueue) Len() int { return q.size }

// Bytes is the total size of the packets queued.
func (q *DelayQueue) Bytes() int { return q.bytes }

// grow doubles the ring, keeping the order of the packets.
func (q *DelayQueue) grow() {
	n := max(2*len(q.buf), 64)
	buf := make([]queued, n)
	for i := range q.size {
		buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf, q.head = buf, 0
}
