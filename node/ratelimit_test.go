package node

import (
	"context"
	"testing"
	"time"
)

func TestBucketRate(t *testing.T) {
	b := newBucket(1 << 20) // 1 MiB/s, burst 100 KiB... at least 64 KiB
	ctx := context.Background()
	start := time.Now()
	for i := 0; i < 8; i++ {
		if err := b.wait(ctx, 64<<10); err != nil {
			t.Fatal(err)
		}
	}
	// 512 KiB at 1 MiB/s minus the initial burst ≈ 0.4 s.
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Fatalf("512 KiB at 1 MiB/s took %v", d)
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.wait(ctx, 10<<20); err == nil {
		t.Fatal("wait on a cancelled context returned nil")
	}
}
