package emu

import (
	"math/rand/v2"
	"testing"
)

// TestDelayQueueOrder pushes packets with random non-decreasing due times and
// pops at random times: every packet comes out in push order, never before
// it is due, and none is lost.
func TestDelayQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q DelayQueue
	var due int64
	var out [][]byte
	next := 0
	for k := range 5000 {
		due += rng.Int64N(100)
		q.Push(due, []byte{byte(k), byte(k >> 8)})
		if rng.IntN(3) == 0 {
			now := due - rng.Int64N(500)
			out = q.PopDue(now, out[:0])
			for _, p := range out {
				if got := int(p[0]) | int(p[1])<<8; got != next {
					t.Fatalf("popped packet %d, want %d", got, next)
				}
				next++
			}
			if d, ok := q.Next(); ok && d <= now {
				t.Fatalf("packet due at %d left in the queue at %d", d, now)
			}
		}
	}
	out = q.PopDue(due, out[:0])
	next += len(out)
	if next != 5000 || q.Len() != 0 || q.Bytes() != 0 {
		t.Fatalf("delivered %d of 5000, %d left (%d B)", next, q.Len(), q.Bytes())
	}
}

// TestDelayQueueClamp: a due time earlier than the previous packet's (the
// delay was lowered) is raised to it, so packets never overtake.
func TestDelayQueueClamp(t *testing.T) {
	var q DelayQueue
	q.Push(100, []byte{1})
	if got := q.Push(50, []byte{2}); got != 100 {
		t.Errorf("Push returned due %d, want 100 (clamped)", got)
	}
	if out := q.PopDue(99, nil); len(out) != 0 {
		t.Errorf("popped %d packets before their time", len(out))
	}
	out := q.PopDue(100, nil)
	if len(out) != 2 || out[0][0] != 1 || out[1][0] != 2 {
		t.Errorf("popped %v, want [[1] [2]]", out)
	}
}
