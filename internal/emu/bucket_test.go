package emu

import (
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// TestBucketPacing: with a one-packet bucket, back-to-back packets leave one
// transmission time apart, so the long-run rate is the configured one.
func TestBucketPacing(t *testing.T) {
	b := Bucket{Rate: 1e6, Burst: 1000, Queue: 1 << 20} // 1 MB/s: 1 ms per 1000 B
	for k := range int64(10) {
		depart, ok := b.Admit(0, 1000)
		if !ok {
			t.Fatalf("packet %d dropped with room in the queue", k)
		}
		if depart != k*ms {
			t.Errorf("packet %d departs at %d ns, want %d", k, depart, k*ms)
		}
	}
}

// TestBucketBurst: after idling, Burst bytes leave at once, then pacing resumes.
func TestBucketBurst(t *testing.T) {
	b := Bucket{Rate: 1e6, Burst: 4000, Queue: 1 << 20}
	b.Admit(0, 1000) // the clock starts; bucket refills by 1 s
	now := int64(time.Second)
	for k := range 4 {
		if d, _ := b.Admit(now, 1000); d != now {
			t.Errorf("burst packet %d departs %d ns late", k, d-now)
		}
	}
	if d, _ := b.Admit(now, 1000); d != now+ms {
		t.Errorf("packet after the burst departs at +%d ns, want +1 ms", d-now)
	}
}

// TestBucketDropTail: packets beyond the queue are dropped and take no
// tokens; once the queue drains, packets pass again.
func TestBucketDropTail(t *testing.T) {
	b := Bucket{Rate: 1e6, Burst: 1000, Queue: 3000}
	var passed, dropped int
	for range 10 {
		if _, ok := b.Admit(0, 1000); ok {
			passed++
		} else {
			dropped++
		}
	}
	// One leaves at once; three wait (3000 B of queue); six are dropped.
	if passed != 4 || dropped != 6 {
		t.Fatalf("passed %d dropped %d, want 4 and 6", passed, dropped)
	}
	if got := b.Backlog(0); got != 3000 {
		t.Errorf("backlog %d B, want 3000", got)
	}
	if d, ok := b.Admit(4*ms, 1000); !ok || d != 4*ms {
		t.Errorf("after draining: depart %d ok %v, want %d true", d, ok, 4*ms)
	}
}

// TestBucketUnlimited: rate 0 passes everything at once.
func TestBucketUnlimited(t *testing.T) {
	var b Bucket
	for k := range int64(100) {
		if d, ok := b.Admit(k, 65535); !ok || d != k {
			t.Fatalf("unlimited bucket delayed or dropped packet %d", k)
		}
	}
}

// TestBucketLongRunRate feeds more than the link can carry for a simulated
// second and checks what passes matches the rate.
func TestBucketLongRunRate(t *testing.T) {
	const rate = 12.5e6 // 100 Mbit/s
	b := Bucket{Rate: rate, Burst: 1500, Queue: 64 << 10}
	var sent int
	var last int64
	for now := int64(0); now < int64(time.Second); now += 50_000 { // 1500 B every 50 µs = 30 MB/s offered
		if d, ok := b.Admit(now, 1500); ok {
			sent += 1500
			last = d
		}
	}
	got := float64(sent) / (float64(last) / 1e9)
	if got < 0.99*rate || got > 1.01*rate {
		t.Errorf("long-run rate %.0f B/s, want %.0f ± 1 %%", got, rate)
	}
}

func TestBucketTxTime(t *testing.T) {
	b := Bucket{Rate: 125e6} // 1 Gbit/s
	if got := b.TxTime(1500); got != 12_000 {
		t.Errorf("1500 B at 1 Gbit/s takes %d ns, want 12000", got)
	}
	var unlimited Bucket
	if got := unlimited.TxTime(65535); got != 0 {
		t.Errorf("unlimited link: %d ns, want 0", got)
	}
}
