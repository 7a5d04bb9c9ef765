package node

import (
	"context"
	"io"
	"log/slog"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// cluster is how the node tests build a network: in-process nodes of one
// run on loopback (the sim device, a millisecond per inner step, no API),
// the first the others' bootstrap, bounded by two minutes.
type cluster struct {
	t     *testing.T
	ctx   context.Context
	run   string
	nodes []*Node

	failOnce sync.Once
	failed   chan struct{} // closed when a node's Run failed the test (start)
}

func newCluster(t *testing.T, run string) *cluster {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &cluster{t: t, ctx: ctx, run: run, failed: make(chan struct{})}
}

// config is a member of the cluster's run that stops after steps outer
// steps (0: when its context ends): two inner steps a step, rings of two
// members at least, bootstrapping from the first node added.
func (c *cluster) config(steps uint64) Config {
	cfg := Config{Home: c.t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Run: c.run,
		Device: "sim", SimStep: time.Millisecond, StatusAddr: "off",
		InnerSteps: 2, MinMembers: 2, MaxOuterSteps: steps, MaxSendRate: 64 << 20,
		CheckpointEvery: 100, Logger: dbgLogger(),
	}
	if len(c.nodes) > 0 {
		cfg.Bootstrap = c.nodes[0].host.Addrs()
	}
	return cfg
}

// add builds a node of the cluster with cfg and opts, failing the test if
// it cannot; its host closes with the test if it never runs.
func (c *cluster) add(cfg Config, opts ...option) *Node {
	c.t.Helper()
	n, err := c.try(cfg, opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// try is add returning newNode's error.
func (c *cluster) try(cfg Config, opts ...option) (*Node, error) {
	n, err := newNode(c.ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	c.t.Cleanup(func() { n.host.Close() })
	c.nodes = append(c.nodes, n)
	return n, nil
}

// start runs nodes in the background until ctx ends or they stop, and
// returns the func that waits for them. check gets each Run's error (nil:
// an error fails the test and ends await).
func (c *cluster) start(ctx context.Context, check func(n *Node, err error), nodes ...*Node) (wait func()) {
	if check == nil {
		check = func(n *Node, err error) {
			if err != nil {
				c.t.Errorf("%s: %v", n.self, err)
				c.failOnce.Do(func() { close(c.failed) })
			}
		}
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { check(n, n.Run(ctx)) })
	}
	return wg.Wait
}

// runAll runs nodes until all of them stop by themselves (MaxOuterSteps).
func (c *cluster) runAll(nodes ...*Node) {
	c.t.Helper()
	c.start(c.ctx, nil, nodes...)()
	if c.t.Failed() {
		c.t.FailNow()
	}
}

// await waits until cond holds, checking it again at every change of a
// node's board (a step, a peer table, a state: no polling), and fails the
// test when the cluster's time is up or a node's Run failed.
func (c *cluster) await(what string, cond func() bool) {
	c.t.Helper()
	for {
		changed := boardChanges(c.nodes)
		if cond() {
			return
		}
		if !changed(c.ctx.Done(), c.failed) {
			c.t.Fatalf("waiting for %s: %v", what, context.Cause(c.ctx))
		}
	}
}

// boardChanges returns a func that waits for the next change of one of the
// nodes' boards after this call, or for one of done: true at a change.
func boardChanges(nodes []*Node) func(done ...<-chan struct{}) bool {
	var cases []reflect.SelectCase
	for _, n := range nodes {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.board.changes())})
	}
	return func(done ...<-chan struct{}) bool {
		all := cases
		for _, d := range done {
			all = append(all[:len(all):len(all)], reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(d)})
		}
		i, _, _ := reflect.Select(all)
		return i < len(cases)
	}
}

// awaitStep waits until every one of nodes finished outer step s.
func (c *cluster) awaitStep(s uint64, nodes ...*Node) {
	c.t.Helper()
	c.await("outer step", func() bool {
		for _, n := range nodes {
			if stepOf(n) < s {
				return false
			}
		}
		return true
	})
}

// stepOf is the outer step n's status shows (safe while n runs).
func stepOf(n *Node) uint64 { return n.board.snapshot().OuterStep }

// fetches is how many model fetches n completed.
func fetches(t *testing.T, n *Node) uint64 {
	var m dto.Metric
	if err := n.met.fetchSeconds.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// dbgLogger discards the nodes' logs unless NODE_LOG is set: then every
// node of a test logs at debug level to stderr.
func dbgLogger() *slog.Logger {
	if os.Getenv("NODE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
