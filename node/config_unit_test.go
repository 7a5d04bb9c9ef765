package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestConfigDefaultsTable pins every default Validate fills into a zero
// Config.
func TestConfigDefaultsTable(t *testing.T) {
	c := Config{Home: t.TempDir()}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		field     string
		got, want any
	}{
		{"Listen", c.Listen, []string{"/ip4/0.0.0.0/tcp/4001", "/ip6/::/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1", "/ip6/::/udp/4001/quic-v1"}},
		{"Reachability", c.Reachability, "auto"},
		{"Averaging", c.Averaging, "robust"},
		{"Optimizer", c.Optimizer, DefaultOptimizer},
		{"Run", c.Run, "default"},
		{"Preset", c.Preset, "tiny"},
		{"Device", c.Device, "cpu"},
		{"StatusAddr", c.StatusAddr, "127.0.0.1:8642"},
		{"Codec", c.Codec, "q2"},
		{"InnerSteps", c.InnerSteps, 26},
		{"MinMembers", c.MinMembers, 1},
		{"Shards", c.Shards, 4},
		{"CheckpointEvery", c.CheckpointEvery, 10},
		{"KeepCheckpoints", c.KeepCheckpoints, 3},
		{"OuterLR", c.OuterLR, float32(0.7)},
		{"OuterMomentum", *c.OuterMomentum, float32(0)},
		{"WorkerMomentum", *c.WorkerMomentum, float32(0.6)},
		{"LRDecay", c.LRDecay, 0.5},
		{"RingOrder", c.RingOrder, "latency"},
		{"Tick", c.Tick, 100 * time.Millisecond},
		{"AllReduceTimeout", c.AllReduceTimeout, 60 * time.Second},
		{"Logger", c.Logger, slog.Default()},
		{"OverlapSteps", c.OverlapSteps, 0},
		{"MaxSendRate", c.MaxSendRate, 0.0},
	}
	for _, tc := range cases {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s = %v, want %v", tc.field, tc.got, tc.want)
		}
	}
}

// TestConfigKeepsSetValues pins that Validate leaves set fields as they are
// and is idempotent.
func TestConfigKeepsSetValues(t *testing.T) {
	c := Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Run: "r", Preset: "small",
		Device: "sim", SimStep: time.Millisecond, StatusAddr: "off", InnerSteps: 20, MinMembers: 3, Shards: 8,
		CheckpointEvery: 2, KeepCheckpoints: 1, OuterLR: 0.7, OuterMomentum: new(float32(0.9)), CloseFraction: new(0.25),
		WorkerMomentum: new(float32(0.3)), LRDecay: 0.4,
		RingOrder: "sorted", Tick: 50 * time.Millisecond, AllReduceTimeout: time.Minute, Overlap: true, OverlapSteps: 20,
		Reachability: "private", Averaging: "robust", Codec: "int8", Tokenizer: "bpe-x", Admission: AdmissionAllowlist, Optimizer: "muon"}
	want := c
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	again := c
	if err := again.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, got := range []Config{c, again} {
		got.Logger = nil
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Fatalf("Validate changed set fields:\n got %+v\nwant %+v", got, want)
		}
	}
}

// TestConfigRejectsTable pins, field by field, that Validate refuses bad
// values with ErrBadConfig and an error that names what is wrong.
func TestConfigRejectsTable(t *testing.T) {
	cases := []struct {
		name string
		set  func(*Config)
		want string // in the error
	}{
		{"overlap steps negative", func(c *Config) { c.OverlapSteps = -1 }, "--overlap-steps"},
		{"overlap steps beyond H", func(c *Config) { c.InnerSteps, c.OverlapSteps = 5, 6 }, "--overlap-steps"},
		{"inner steps negative", func(c *Config) { c.InnerSteps = -3 }, "inner-steps"},
		{"min members negative", func(c *Config) { c.MinMembers = -1 }, "--min-members"},
		{"shards negative", func(c *Config) { c.Shards = -1 }, "shards"},
		{"shards too many", func(c *Config) { c.Shards = 65 }, "shards"},
		{"outer lr negative", func(c *Config) { c.OuterLR = -0.5 }, "outer lr"},
		{"outer lr too large", func(c *Config) { c.OuterLR = 10.5 }, "outer lr"},
		{"outer lr NaN", func(c *Config) { c.OuterLR = float32(math.NaN()) }, "outer lr"},
		{"momentum negative", func(c *Config) { c.OuterMomentum = new(float32(-0.01)) }, "momentum"},
		{"momentum 1", func(c *Config) { c.OuterMomentum = new(float32(1)) }, "momentum"},
		{"momentum NaN", func(c *Config) { c.OuterMomentum = new(float32(math.NaN())) }, "momentum"},
		{"worker momentum 1", func(c *Config) { c.WorkerMomentum = new(float32(1)) }, "worker momentum"},
		{"worker momentum NaN", func(c *Config) { c.WorkerMomentum = new(float32(math.NaN())) }, "worker momentum"},
		{"tick too short", func(c *Config) { c.Tick = time.Microsecond }, "tick"},
		{"tick negative", func(c *Config) { c.Tick = -time.Second }, "tick"},
		{"sim without step", func(c *Config) { c.Device = "sim" }, "--sim-step"},
		{"sim with negative step", func(c *Config) { c.Device, c.SimStep = "sim", -1 }, "--sim-step"},
		{"ring order unknown", func(c *Config) { c.RingOrder = "random" }, "--ring-order"},
		{"send rate negative", func(c *Config) { c.MaxSendRate = -1 }, "send rate"},
		{"keep negative", func(c *Config) { c.KeepCheckpoints = -2 }, "checkpoint"},
		{"admission unknown", func(c *Config) { c.Admission = "vip" }, "--admission"},
		{"optimizer unknown", func(c *Config) { c.Optimizer = "sgd" }, "--optimizer"},
		{"status addr without port", func(c *Config) { c.StatusAddr = "127.0.0.1" }, "--status"},
		{"status addr open without token", func(c *Config) { c.StatusAddr = "0.0.0.0:8642" }, "--status-token-file"},
		{"status addr on a LAN ip without token", func(c *Config) { c.StatusAddr = "192.168.1.5:8642" }, "reachable"},
		{"status addr all interfaces without token", func(c *Config) { c.StatusAddr = ":8642" }, "reachable"},
		{"token too short", func(c *Config) { c.StatusToken = "0123456789abcde" }, "at least 16"},
		{"token too short, status off", func(c *Config) { c.StatusAddr, c.StatusToken = "off", "x" }, "at least 16"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Home: t.TempDir()}
			tc.set(&c)
			err := c.Validate()
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("err = %v, want ErrBadConfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %q does not mention %q", err, tc.want)
			}
		})
	}
}

// TestConfigAcceptsTable pins edge values Validate must accept.
func TestConfigAcceptsTable(t *testing.T) {
	cases := []struct {
		name string
		set  func(*Config)
	}{
		{"status off, open nothing", func(c *Config) { c.StatusAddr = "off" }},
		{"status on localhost", func(c *Config) { c.StatusAddr = "localhost:0" }},
		{"status on IPv6 loopback", func(c *Config) { c.StatusAddr = "[::1]:8642" }},
		{"status open with a token", func(c *Config) { c.StatusAddr, c.StatusToken = "0.0.0.0:8642", "0123456789abcdef" }},
		{"overlap steps = H", func(c *Config) { c.InnerSteps, c.OverlapSteps = 7, 7 }},
		{"one shard", func(c *Config) { c.Shards = 1 }},
		{"64 shards", func(c *Config) { c.Shards = 64 }},
		{"outer lr 10", func(c *Config) { c.OuterLR = 10 }},
		{"momentum just below 1", func(c *Config) { c.OuterMomentum = new(float32(0.999)) }},
		{"tick 1 ms", func(c *Config) { c.Tick = time.Millisecond }},
		{"sim with a step", func(c *Config) { c.Device, c.SimStep = "sim", time.Nanosecond }},
		{"sorted rings", func(c *Config) { c.RingOrder = "sorted" }},
		{"send rate limited", func(c *Config) { c.MaxSendRate = 1e6 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Home: t.TempDir()}
			tc.set(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// pointOf is the operating point a validated c runs.
func pointOf(c Config) Point {
	return Point{c.InnerSteps, c.OuterLR, *c.OuterMomentum, *c.WorkerMomentum, c.LRDecay}
}

// TestConfigCodecPoint pins that each codec's zero settings take its
// operating point, and that set values — an explicit 0 momentum among them
// — are kept.
func TestConfigCodecPoint(t *testing.T) {
	for _, codec := range []string{CodecQ2, CodecInt8, CodecQ4, CodecTopK, CodecFP32} {
		c := Config{Home: t.TempDir(), Codec: codec, Overlap: true}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		got := pointOf(c)
		if got != CodecPoint(codec) {
			t.Errorf("%s: %+v, want %+v", codec, got, CodecPoint(codec))
		}
		set := Config{Home: t.TempDir(), Codec: codec, InnerSteps: 7, OuterLR: 0.9, OuterMomentum: new(float32(0.5)),
			WorkerMomentum: new(float32(0)), LRDecay: 0.3}
		if err := set.Validate(); err != nil {
			t.Fatal(err)
		}
		got = pointOf(set)
		if want := (Point{7, 0.9, 0.5, 0, 0.3}); got != want {
			t.Errorf("%s: set values became %+v, want %+v", codec, got, want)
		}
	}
	if Q2Point == Int8Point || CodecPoint(DefaultCodec) != Q2Point || CodecPoint(CodecInt8) != Int8Point {
		t.Error("the default codec's point is not q2's, or int8's is q2's")
	}
}

// TestTrainOptions pins how a node's training options come from its
// config: the preset, the run's seed unless given, the worker from the peer
// id, and a schedule that ends with --max-outer-steps.
func TestTrainOptions(t *testing.T) {
	self := unitPeerID(t)
	c := Config{Home: t.TempDir(), Run: "r1"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	o, err := trainOptions(c, self)
	if err != nil {
		t.Fatal(err)
	}
	def, _ := train.DefaultOptions("tiny")
	if o.Model != def.Model || o.Seed != RunSeed("r1") || o.Worker != workerID(self) || o.TotalSteps != def.TotalSteps {
		t.Fatalf("options %+v", o)
	}
	c.Seed, c.MaxOuterSteps, c.InnerSteps = 77, 40, 5
	if o, err = trainOptions(c, self); err != nil || o.Seed != 77 || o.TotalSteps != 200 {
		t.Fatalf("seed %d total %d (%v), want 77 and 200", o.Seed, o.TotalSteps, err)
	}
	if o.DecayFrac != Q2Point.LRDecay {
		t.Fatalf("decay %v without --lr-decay, want the default codec's %v", o.DecayFrac, Q2Point.LRDecay)
	}
	i8 := Config{Home: t.TempDir(), Run: "r1", Codec: CodecInt8}
	if err := i8.Validate(); err != nil {
		t.Fatal(err)
	}
	if o, err := trainOptions(i8, self); err != nil || o.DecayFrac != def.DecayFrac {
		t.Fatalf("--codec int8: decay %v (%v), want the preset's %v", o.DecayFrac, err, def.DecayFrac)
	}
	c.LRDecay = 1
	if o, err = trainOptions(c, self); err != nil || o.DecayFrac != 1 || o.LRAt(100) >= o.LR || o.LRAt(199) > o.MinLR*1.0001 {
		t.Fatalf("--lr-decay 1: decay %v, LR at 100 %v and 199 %v (%v)", o.DecayFrac, o.LRAt(100), o.LRAt(199), err)
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		c.LRDecay = bad
		if err := c.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("--lr-decay %v: %v, want ErrBadConfig", bad, err)
		}
	}
	c.LRDecay = 0
	c.MaxOuterSteps = 1 // shorter than the warmup: the schedule still has a step after it
	if o, err = trainOptions(c, self); err != nil || o.TotalSteps != o.WarmupSteps+1 {
		t.Fatalf("total %d warmup %d (%v)", o.TotalSteps, o.WarmupSteps, err)
	}
	c.Preset = "no-such-preset"
	if _, err := trainOptions(c, self); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("unknown preset: %v, want ErrBadConfig", err)
	}
}

// TestRunSeedAndWorkerID pins the derived ids: deterministic, different for
// different runs and peers.
func TestRunSeedAndWorkerID(t *testing.T) {
	if a, again := RunSeed("a"), RunSeed("a"); a != again || a == RunSeed("b") || RunSeed("") == RunSeed("default") {
		t.Fatal("RunSeed is not a function of the run name")
	}
	p, q := unitPeerID(t), unitPeerID(t)
	if w, again := workerID(p), workerID(p); w != again || w == workerID(q) {
		t.Fatal("workerID is not a function of the peer id")
	}
}

// TestAllReduceConfigTable pins the all-reduce a node's config asks for.
func TestAllReduceConfigTable(t *testing.T) {
	cases := []struct {
		cfg  Config
		want collective.AllReduceConfig
	}{
		{Config{Shards: 4}, collective.AllReduceConfig{Shards: 4}},
		{Config{Shards: 8, ErrorFeedback: true}, collective.AllReduceConfig{Shards: 8, ErrorFeedback: true}},
		{Config{Shards: 2, FP32: true}, collective.AllReduceConfig{Shards: 2, Codec: collective.CodecFP32}},
	}
	for _, c := range cases {
		if got := c.cfg.allReduceConfig(); got != c.want {
			t.Errorf("allReduceConfig(%+v) = %+v, want %+v", c.cfg, got, c.want)
		}
	}
}

// TestReferenceDiLoCoConfig pins the in-process reference of a run: workers
// in member order, H, outer steps and optimizer from the config, and an
// overlapped run without fixed --overlap-steps refused.
func TestReferenceDiLoCoConfig(t *testing.T) {
	members := []peer.ID{unitPeerID(t), unitPeerID(t), unitPeerID(t)}
	cfg := Config{Home: t.TempDir(), Run: "ref", InnerSteps: 3, MaxOuterSteps: 4, OuterLR: 0.8, OuterMomentum: new(float32(0.5))}
	d, err := ReferenceDiLoCo(cfg, members)
	if err != nil {
		t.Fatal(err)
	}
	if d.Inner != 3 || d.Outer != 4 || d.OuterLR != 0.8 || d.OuterMomentum != 0.5 || d.Lag != 0 || d.Averaging.Scatter == nil || d.Averaging.Judge == nil {
		t.Fatalf("reference %+v", d)
	}
	want := []uint64{workerID(members[0]), workerID(members[1]), workerID(members[2])}
	if !slices.Equal(d.Workers, want) || d.Options.Seed != RunSeed("ref") {
		t.Fatalf("workers %v seed %d", d.Workers, d.Options.Seed)
	}
	cfg.Overlap, cfg.OverlapSteps = true, 2
	if d, err = ReferenceDiLoCo(cfg, members); err != nil || d.Lag != 2 {
		t.Fatalf("overlapped reference: %d, %v", d.Lag, err)
	}
	cfg.Overlap, cfg.Averaging, cfg.FP32 = false, AveragingMean, true
	if d, err = ReferenceDiLoCo(cfg, members); err != nil || d.Averaging.Ring == nil || d.Averaging.Ring.Codec != collective.CodecFP32 {
		t.Fatalf("reference of a ring with --fp32: %+v, %v", d.Averaging, err)
	}
	cfg.Overlap = true
	cfg.OverlapSteps = 0
	if _, err := ReferenceDiLoCo(cfg, members); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("overlap without fixed steps: %v, want ErrBadConfig", err)
	}
	cfg.OverlapSteps = 9 // beyond H: Validate refuses
	if _, err := ReferenceDiLoCo(cfg, members); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("overlap steps beyond H: %v, want ErrBadConfig", err)
	}
}

// TestFailureCauseTable pins the cause label of a failed attempt, wrapped
// or not, a peer being named taking precedence over a timeout.
func TestFailureCauseTable(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&deadMemberError{peer: "x"}, "peer"},
		{fmt.Errorf("attempt: %w", &deadMemberError{peer: "x"}), "peer"},
		{&collective.PeerError{Rank: 1, Err: errors.New("reset")}, "peer"},
		{fmt.Errorf("ring: %w", &collective.PeerError{Rank: 0}), "peer"},
		{&ring.PeerError{Rank: 2}, "peer"},
		{&collective.PeerError{Rank: 1, Err: context.DeadlineExceeded}, "peer"},
		{&ring.PeerError{Rank: 1, Err: &collective.PeerError{Err: context.Canceled}}, "peer"},
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("send: %w", context.DeadlineExceeded), "timeout"},
		{context.Canceled, "canceled"},
		{fmt.Errorf("recv: %w", context.Canceled), "canceled"},
		{errors.New("ring id mismatch"), "other"},
		{nil, "other"},
	}
	for _, c := range cases {
		if got := failureCause(c.err); got != c.want {
			t.Errorf("failureCause(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// countingSource is a train.Source that counts tokens per component.
type countingSource struct {
	train.Source
	counts map[string]int64
}

func (s countingSource) TokensBySource() map[string]int64 { return s.counts }

// TestTokensBySourceTable pins tokensBySource: a mixture's counts, nil for
// a source that has no components.
func TestTokensBySourceTable(t *testing.T) {
	cases := []struct {
		name string
		src  train.Source
		want map[string]int64
	}{
		{"embedded corpus", train.DefaultSource(), nil},
		{"nil source", nil, nil},
		{"mixture", countingSource{train.DefaultSource(), map[string]int64{"web": 10, "code": 3}}, map[string]int64{"web": 10, "code": 3}},
		{"mixture before any step", countingSource{train.DefaultSource(), map[string]int64{}}, map[string]int64{}},
	}
	for _, c := range cases {
		got := tokensBySource(c.src)
		if fmt.Sprint(got) != fmt.Sprint(c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestCheckpointOnlyAtExit: a negative CheckpointEvery (the flag's 0) is
// valid and stays negative: no checkpoint during the run, one at exit.
func TestCheckpointOnlyAtExit(t *testing.T) {
	c := Config{Run: "x", Home: t.TempDir(), CheckpointEvery: -1}
	if err := c.Validate(); err != nil || c.CheckpointEvery != -1 {
		t.Fatalf("CheckpointEvery -1: %v, now %d", err, c.CheckpointEvery)
	}
}
