package node

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// twoNodeConfig is a member of a two-node sim run that stops after steps
// outer steps.
func twoNodeConfig(t *testing.T, steps uint64, overlap bool, bootstrap []string) Config {
	return Config{Overlap: overlap,
		Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: bootstrap,
		Run: "node-test", Device: "sim", SimStep: time.Millisecond, StatusAddr: "off",
		InnerSteps: 2, MinMembers: 2, MaxOuterSteps: steps, MaxSendRate: 64 << 20,
		CheckpointEvery: 100, Logger: dbgLogger(),
	}
}

// dbgLogger discards the nodes' logs unless NODE_LOG is set: then every
// node of a test logs at debug level to stderr (how the CI failures of
// TestFalseReportExcludesOwner were found).
func dbgLogger() *slog.Logger {
	if os.Getenv("NODE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestTwoNodesRunAndStop runs two in-process nodes for two outer steps over
// the real host, mesh and all-reduce, blocking and overlapped: both end with
// the same model, and (checked by TestMain) every goroutine they started has
// ended.
func TestTwoNodesRunAndStop(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		t.Run(map[bool]string{false: "blocking", true: "overlap"}[overlap], func(t *testing.T) {
			twoNodesRunAndStop(t, overlap, AveragingMean)
		})
	}
	t.Run("robust", func(t *testing.T) { twoNodesRunAndStop(t, false, AveragingRobust) })
}

// runPair starts a creator with ca and a joiner with cb (bootstrapping from
// it), runs both until they stop by themselves, and returns them and the
// joiner's config.
func runPair(ctx context.Context, t *testing.T, ca, cb Config) (a, b *Node, cbOut Config) {
	t.Helper()
	a, err := New(ctx, ca)
	if err != nil {
		t.Fatal(err)
	}
	cb.Bootstrap = a.host.Addrs()
	b, err = New(ctx, cb)
	if err != nil {
		a.host.Close()
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, n := range []*Node{a, b} {
		go func() { errs <- n.Run(ctx) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return a, b, cb
}

func twoNodesRunAndStop(t *testing.T, overlap bool, averaging string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const steps = 2
	ca := twoNodeConfig(t, steps, overlap, nil)
	ca.Averaging = averaging
	cb := twoNodeConfig(t, steps, overlap, nil)
	cb.Averaging = averaging
	a, b, _ := runPair(ctx, t, ca, cb)
	if a.model.Step() != steps || b.model.Step() != steps || a.model.Hash() != b.model.Hash() {
		t.Fatalf("a at step %d (%s), b at step %d (%s): want step %d, same hash", a.model.Step(), a.model.Hash(), b.model.Step(), b.model.Hash(), steps)
	}
	for _, n := range []*Node{a, b} {
		hist := n.board.historyList()
		if len(hist) != steps+1 { // [0]: the initial model
			t.Fatalf("%d history records, want %d", len(hist), steps+1)
		}
		for _, r := range hist[1:] {
			if r.Members != 2 || r.BytesSent == 0 || r.BytesReceived == 0 {
				t.Fatalf("step %d reduced over %d members, %d bytes sent, %d received: want both members over the network",
					r.Step, r.Members, r.BytesSent, r.BytesReceived)
			}
		}
	}
}

// TestRestartWhileBootstrapDown: a member restarted with its home while
// its only bootstrap peer is gone starts (resuming its checkpoint) instead
// of failing, and stops cleanly.
func TestRestartWhileBootstrapDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _, cb := runPair(ctx, t, twoNodeConfig(t, 1, false, nil), twoNodeConfig(t, 1, false, nil))
	cb.MaxOuterSteps = 0
	again, err := New(ctx, cb)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { errs <- again.Run(rctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for again.board.snapshot().PeerID == "" {
		select {
		case err := <-errs:
			t.Fatalf("the restarted member stopped before it started: %v", err)
		case <-tick.C:
		}
	}
	stop()
	if err := <-errs; err != nil {
		t.Fatalf("run: %v", err)
	}
	if again.model.Step() != 1 {
		t.Fatalf("restarted at outer step %d, want its checkpoint's 1", again.model.Step())
	}
}
