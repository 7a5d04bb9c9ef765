package wan

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// needRoot skips the test unless it can build namespaces and TUN devices.
func needRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("wan: namespace tests skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("wan: needs root to create network namespaces (run as root or via make bench-wan)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("wan: needs /dev/net/tun: %v", err)
	}
}

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return nil
}

// startNet starts p and closes it when the test ends.
func startNet(t *testing.T, p Profile, o Options) *Net {
	t.Helper()
	o.Log = testLog(t)
	n, err := Start(context.Background(), p, o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return n
}

// TestRTT builds two hosts with 20 ms one-way delay each way and checks the
// round trip is 40 ms: never less, and only a little more on a busy machine.
func TestRTT(t *testing.T) {
	needRoot(t)
	n := startNet(t, Pair(40, 0, 0), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := n.RTT(ctx, 0, 1, 15)
	if err != nil {
		t.Fatal(err)
	}
	med := s[len(s)/2]
	t.Logf("RTT min %v median %v max %v", s[0], med, s[len(s)-1])
	if s[0] < 40*time.Millisecond {
		t.Errorf("fastest round trip %v is shorter than the 40 ms the links impose", s[0])
	}
	if med > 48*time.Millisecond {
		t.Errorf("median round trip %v, want 40 ms + at most 8 ms of forwarding", med)
	}
}
