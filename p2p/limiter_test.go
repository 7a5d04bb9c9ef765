package p2p

import (
	"testing"
	"time"
)

func TestCkptBucket(t *testing.T) {
	now := time.Unix(0, 0)
	b := newLimiter(1000, 500, func() time.Time { return now })
	steps := []struct {
		advance time.Duration
		take    int
		want    time.Duration
	}{
		{0, 500, 0},                      // the full burst is free
		{0, 100, 100 * time.Millisecond}, // then 1000 B/s
		{0, 100, 200 * time.Millisecond}, // debts queue up
		{time.Second, 100, 0},            // a second repays 1000 B, capped at burst
		{10 * time.Second, 400, 0},       // never more than burst saved
		{0, 200, 100 * time.Millisecond},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		if got := b.reserve(s.take); got != s.want {
			t.Fatalf("step %d: wait %v, want %v", i, got, s.want)
		}
	}
}

// TestLimiterLargerThanBurst: a Wait larger than the burst is allowed and
// waits for its debt, so the long-run rate still holds (node's
// --max-send-rate sends chunk messages larger than its burst).
func TestLimiterLargerThanBurst(t *testing.T) {
	now := time.Unix(0, 0)
	b := newLimiter(1000, 100, func() time.Time { return now })
	if d := b.reserve(600); d != 500*time.Millisecond {
		t.Fatalf("600 bytes from a full 100-byte bucket at 1000 B/s: wait %v, want 500ms", d)
	}
	now = now.Add(500 * time.Millisecond)
	if d := b.reserve(100); d != 100*time.Millisecond {
		t.Fatalf("next 100 bytes: wait %v, want 100ms", d)
	}
}

// TestLimiterSetRate: tokens earned before a rate change count at the old
// rate, later debts are repaid at the new one.
func TestLimiterSetRate(t *testing.T) {
	now := time.Unix(0, 0)
	b := newLimiter(1000, 1000, func() time.Time { return now })
	if d := b.reserve(1000); d != 0 {
		t.Fatalf("burst: wait %v", d)
	}
	now = now.Add(500 * time.Millisecond) // 500 B earned at 1000 B/s
	b.SetRate(100)
	if d := b.reserve(600); d != time.Second { // 100 B of debt at 100 B/s
		t.Fatalf("after slowing down: wait %v, want 1s", d)
	}
	b.SetRate(1000)
	if d := b.reserve(100); d != 200*time.Millisecond { // 200 B of debt at 1000 B/s
		t.Fatalf("after speeding up: wait %v, want 200ms", d)
	}
}
