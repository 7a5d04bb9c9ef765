package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/train"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var unitLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// newCkptNode builds by hand a sim-device node of run "r" at step whose
// model is θ₀ = engine params and v a known vector, with what
// writeCheckpoint and resume need.
func newCkptNode(t *testing.T, home string, step uint64, keep int) *Node {
	t.Helper()
	cfg := Config{Home: home, Run: "r", Device: "sim", SimStep: time.Nanosecond, StatusAddr: "off", Codec: CodecInt8,
		KeepCheckpoints: keep, OuterLR: 0.7, OuterMomentum: new(float32(0.9)), Logger: unitLog}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	eng, err := newSimEngine(simOptions(21, 1), cfg.SimStep)
	if err != nil {
		t.Fatal(err)
	}
	simSteps(t, eng, 3) // the engine's model is not θ₀
	n := &Node{cfg: cfg, log: unitLog, met: unitMetrics(), engine: eng}
	theta0 := unitVec(step+1, len(eng.Params()), 1)
	n.model = diloco.NewModel(step, theta0, &diloco.Outer{LR: 0.7, Momentum: 0.9, V: unitVec(step+1000, len(theta0), 0.1)})
	n.params = int64(len(theta0))
	return n
}

// freshNode is a node of the same config as nd with nothing loaded, as
// initModel has it before resume.
func freshNode(nd *Node) *Node {
	return &Node{cfg: nd.cfg, log: unitLog, met: unitMetrics()}
}

// ckptDir is the checkpoint directory of step under home.
func ckptDir(home string, step uint64) string {
	return filepath.Join(home, checkpointDir, fmt.Sprintf("%s%08d", train.CheckpointPrefix, step))
}

// TestCheckpointResumeRoundTrip pins write-then-resume: θ₀, v, the step and
// θ₀'s hash come back bit for bit, the engine is put on θ₀, and the outer
// optimizer has the configured lr and momentum.
func TestCheckpointResumeRoundTrip(t *testing.T) {
	home := t.TempDir()
	nd := newCkptNode(t, home, 17, 3)
	hist := []mesh.Made{{Step: 16, Members: []mesh.PeerID{"a", "b"}}, {Step: 17, Members: []mesh.PeerID{"a", "c"}}}
	nd.history.set(17, nd.model.Hash(), hist)
	if err := nd.saveCheckpoint(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{outerFile, nodeStateFile, filepath.Join(engineSubdir, "model.safetensors")} {
		if _, err := os.Stat(filepath.Join(ckptDir(home, 17), f)); err != nil {
			t.Fatalf("checkpoint lacks %s: %v", f, err)
		}
	}
	r := freshNode(nd)
	ok, err := r.resume(simOptions(21, 1))
	if err != nil || !ok {
		t.Fatalf("resume = %v, %v", ok, err)
	}
	if r.model.Step() != 17 || !slices.Equal(theta0Of(r.model), theta0Of(nd.model)) || !slices.Equal(momentumOf(r.model), momentumOf(nd.model)) {
		t.Fatalf("resumed step %d; θ₀ or v differ", r.model.Step())
	}
	if train.Hash(theta0Of(r.model)) != nd.model.Hash() {
		t.Fatal("resumed θ₀ does not hash to the saved hash")
	}
	if !slices.Equal(r.engine.Params(), theta0Of(nd.model)) {
		t.Fatal("the resumed engine is not on θ₀")
	}
	if r.model.Outer().LR != 0.7 || r.model.Outer().Momentum != 0.9 {
		t.Fatalf("outer optimizer lr %v momentum %v", r.model.Outer().LR, r.model.Outer().Momentum)
	}
	var st nodeState
	b, _ := os.ReadFile(filepath.Join(ckptDir(home, 17), nodeStateFile))
	if err := json.Unmarshal(b, &st); err != nil || !reflect.DeepEqual(st, nodeState{Format: nodeStateMagic, Run: "r", Step: 17, Hash: nd.model.Hash(), History: hist}) {
		t.Fatalf("node.json %+v (%v)", st, err)
	}
	if !reflect.DeepEqual(r.resumedHist, hist) {
		t.Fatalf("resumed history %+v, want %+v", r.resumedHist, hist)
	}
	// A history that breaks the mesh's rules is a corrupt checkpoint.
	st.History = []mesh.Made{{Step: 18, Members: []mesh.PeerID{"a"}}}
	b, _ = json.Marshal(st)
	if err := os.WriteFile(filepath.Join(ckptDir(home, 17), nodeStateFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := freshNode(nd).resume(simOptions(21, 1)); err == nil || !strings.Contains(err.Error(), "history entry 0 is of step 18") {
		t.Fatalf("resume with a history from the future: %v", err)
	}
}

// TestCheckpointKeepsMemberVectors pins the member's own vectors across a
// restart — the error-feedback residual and the worker momentum: the loop's
// is written with the checkpoint, comes back with the resumed model and is
// the new loop's from its first attempt; without the setting there is none.
func TestCheckpointKeepsMemberVectors(t *testing.T) {
	for _, c := range []struct {
		name    string
		set     func(*Config)
		put     func(*diloco.Loop, []float32) error
		resumed func(*Node) []float32
		loops   func(*diloco.Loop) []float32
	}{
		{"residual", func(c *Config) { c.ErrorFeedback = true }, (*diloco.Loop).SetResidual,
			func(n *Node) []float32 { return n.resumedRes }, (*diloco.Loop).Residual},
		{"worker momentum", func(c *Config) { c.WorkerMomentum = new(float32(0.6)) }, (*diloco.Loop).SetWorkerMomentum,
			func(n *Node) []float32 { return n.resumedMom }, (*diloco.Loop).WorkerMomentum},
	} {
		t.Run(c.name, func(t *testing.T) {
			nd := newCkptNode(t, t.TempDir(), 9, 3)
			bare := nd.cfg
			c.set(&nd.cfg)
			l, err := diloco.New(diloco.Config{Inner: 2, ErrorFeedback: nd.cfg.ErrorFeedback, WorkerMomentum: *nd.cfg.WorkerMomentum},
				nd.engine, nd.model, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := unitVec(77, int(nd.params), 0.01)
			if err := c.put(l, want); err != nil {
				t.Fatal(err)
			}
			nd.loop = l
			if err := nd.saveCheckpoint(); err != nil {
				t.Fatal(err)
			}
			r := freshNode(nd)
			if ok, err := r.resume(simOptions(21, 1)); !ok || err != nil || !slices.Equal(c.resumed(r), want) {
				t.Fatalf("resume = %v, %v; the vector came back: %v", ok, err, slices.Equal(c.resumed(r), want))
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the loop stops after its first inner step
			if err := r.trainLoop(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("trainLoop: %v", err)
			}
			if c.resumed(r) != nil || !slices.Equal(c.loops(r.loop), want) {
				t.Fatal("the loop does not carry the resumed vector")
			}
			nd.loop, nd.cfg = nil, bare
			nd.cfg.Home = t.TempDir()
			if err := nd.saveCheckpoint(); err != nil {
				t.Fatal(err)
			}
			r2 := freshNode(nd)
			if ok, err := r2.resume(simOptions(21, 1)); !ok || err != nil || c.resumed(r2) != nil {
				t.Fatalf("resume without the setting: %v, %v, vector %v", ok, err, c.resumed(r2) != nil)
			}
		})
	}
}

// TestResumeNothing pins that a home without checkpoints resumes nothing,
// without error.
func TestResumeNothing(t *testing.T) {
	nd := newCkptNode(t, t.TempDir(), 0, 3)
	if ok, err := freshNode(nd).resume(simOptions(21, 1)); ok || err != nil {
		t.Fatalf("resume of an empty home = %v, %v", ok, err)
	}
	if err := os.MkdirAll(filepath.Join(nd.cfg.Home, checkpointDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if ok, err := freshNode(nd).resume(simOptions(21, 1)); ok || err != nil {
		t.Fatalf("resume of an empty checkpoints dir = %v, %v", ok, err)
	}
}

// TestResumeNewestAndKeep pins that resume takes the newest checkpoint and
// that writing keeps only KeepCheckpoints of them.
func TestResumeNewestAndKeep(t *testing.T) {
	home := t.TempDir()
	var last *Node
	for _, step := range []uint64{2, 4, 9, 10, 12} {
		last = newCkptNode(t, home, step, 3)
		if err := last.writeCheckpoint(); err != nil {
			t.Fatal(err)
		}
	}
	es, err := os.ReadDir(filepath.Join(home, checkpointDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	want := []string{"step-00000009", "step-00000010", "step-00000012"}
	if !slices.Equal(names, want) {
		t.Fatalf("checkpoints kept %v, want %v", names, want)
	}
	r := freshNode(last)
	if ok, err := r.resume(simOptions(21, 1)); !ok || err != nil || r.model.Step() != 12 || !slices.Equal(theta0Of(r.model), theta0Of(last.model)) {
		t.Fatalf("resumed step %d (%v, %v), want 12", r.model.Step(), ok, err)
	}
}

// TestResumeRejectsBadCheckpoints pins that a damaged or foreign newest
// checkpoint is an error naming the checkpoint and what is wrong, never a
// silent fresh start.
func TestResumeRejectsBadCheckpoints(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string, nd *Node)
		want   []string // substrings of the error
	}{
		{"node.json missing", func(t *testing.T, dir string, _ *Node) {
			ckptRemove(t, filepath.Join(dir, nodeStateFile))
		}, []string{nodeStateFile}},
		{"node.json not JSON", func(t *testing.T, dir string, _ *Node) {
			ckptWrite(t, filepath.Join(dir, nodeStateFile), "{not json")
		}, []string{nodeStateFile, "not a node state"}},
		{"node.json of another format", func(t *testing.T, dir string, nd *Node) {
			writeState(t, dir, nodeState{Format: "intellect-node/node/0", Run: "r", Step: 5, Hash: nd.model.Hash()})
		}, []string{nodeStateFile, "not a node state"}},
		{"another run", func(t *testing.T, dir string, nd *Node) {
			writeState(t, dir, nodeState{Format: nodeStateMagic, Run: "other", Step: 5, Hash: nd.model.Hash()})
		}, []string{`run "other"`, `not "r"`}},
		{"hash of another model", func(t *testing.T, dir string, _ *Node) {
			writeState(t, dir, nodeState{Format: nodeStateMagic, Run: "r", Step: 5, Hash: train.Hash([]float32{1})})
		}, []string{"does not match its hash"}},
		{"outer.safetensors missing", func(t *testing.T, dir string, _ *Node) {
			ckptRemove(t, filepath.Join(dir, outerFile))
		}, []string{outerFile}},
		{"outer.safetensors truncated", func(t *testing.T, dir string, _ *Node) {
			p := filepath.Join(dir, outerFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			ckptWrite(t, p, string(b[:len(b)/2]))
		}, []string{outerFile}},
		{"outer.safetensors garbage", func(t *testing.T, dir string, _ *Node) {
			ckptWrite(t, filepath.Join(dir, outerFile), "garbage, not a safetensors file")
		}, []string{outerFile}},
		{"outer momentum missing", func(t *testing.T, dir string, nd *Node) {
			writeOuter(t, dir, []train.Tensor{{Name: "theta0", Shape: []int{len(theta0Of(nd.model))}, Data: theta0Of(nd.model)}})
		}, []string{"outer state missing"}},
		{"θ₀ missing", func(t *testing.T, dir string, nd *Node) {
			writeOuter(t, dir, []train.Tensor{{Name: "outer_momentum", Shape: []int{len(momentumOf(nd.model))}, Data: momentumOf(nd.model)}})
		}, []string{"outer state missing"}},
		{"θ₀ changed after hashing", func(t *testing.T, dir string, nd *Node) {
			th := slices.Clone(theta0Of(nd.model))
			th[len(th)/2] += 0.5
			writeOuter(t, dir, []train.Tensor{
				{Name: "theta0", Shape: []int{len(th)}, Data: th},
				{Name: "outer_momentum", Shape: []int{len(momentumOf(nd.model))}, Data: momentumOf(nd.model)}})
		}, []string{"does not match its hash"}},
		{"momentum of another size", func(t *testing.T, dir string, nd *Node) {
			v := momentumOf(nd.model)[:10]
			writeOuter(t, dir, []train.Tensor{
				{Name: "theta0", Shape: []int{len(theta0Of(nd.model))}, Data: theta0Of(nd.model)},
				{Name: "outer_momentum", Shape: []int{len(v)}, Data: v}})
		}, []string{"outer state missing"}},
		{"residual of another size", func(t *testing.T, dir string, nd *Node) {
			th, v := modelOf(nd.model)
			writeOuter(t, dir, []train.Tensor{
				{Name: "theta0", Shape: []int{len(th)}, Data: th},
				{Name: "outer_momentum", Shape: []int{len(v)}, Data: v},
				{Name: "ef_residual", Shape: []int{3}, Data: []float32{1, 2, 3}}})
		}, []string{"error-feedback residual of 3 values"}},
		{"worker momentum of another size", func(t *testing.T, dir string, nd *Node) {
			th, v := modelOf(nd.model)
			writeOuter(t, dir, []train.Tensor{
				{Name: "theta0", Shape: []int{len(th)}, Data: th},
				{Name: "outer_momentum", Shape: []int{len(v)}, Data: v},
				{Name: "worker_momentum", Shape: []int{2}, Data: []float32{1, 2}}})
		}, []string{"worker momentum of 2 values"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			nd := newCkptNode(t, home, 5, 3)
			if err := nd.writeCheckpoint(); err != nil {
				t.Fatal(err)
			}
			dir := ckptDir(home, 5)
			c.damage(t, dir, nd)
			r := freshNode(nd)
			ok, err := r.resume(simOptions(21, 1))
			if ok || err == nil {
				t.Fatalf("resume = %v, %v; want an error", ok, err)
			}
			for _, s := range append([]string{dir}, c.want...) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if r.engine != nil {
				t.Error("a refused checkpoint left an engine")
			}
		})
	}
}

// TestResumeRejectsOtherModel pins that a checkpoint of a model of another
// size is refused, naming both sizes.
func TestResumeRejectsOtherModel(t *testing.T) {
	home := t.TempDir()
	nd := newCkptNode(t, home, 5, 3)
	if err := nd.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	opts := simOptions(21, 1)
	opts.Model.FFN *= 2
	_, err := freshNode(nd).resume(opts)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(len(theta0Of(nd.model)))) || !strings.Contains(err.Error(), fmt.Sprint(opts.Model.NumParams())) {
		t.Fatalf("resume with a bigger model: %v", err)
	}
}

// TestCheckpointWriteFailure pins that a failed write is counted, returned,
// and leaves no checkpoint behind.
func TestCheckpointWriteFailure(t *testing.T) {
	home := t.TempDir()
	nd := newCkptNode(t, home, 3, 3)
	nd.engine = failingSave{nd.engine}
	if err := nd.saveCheckpoint(); err == nil {
		t.Fatal("a failing engine save went unnoticed")
	}
	if got := testutil.ToFloat64(nd.met.ckptFailures); got != 1 {
		t.Fatalf("checkpoint failures %v, want 1", got)
	}
	if ok, err := freshNode(nd).resume(simOptions(21, 1)); ok || err != nil {
		t.Fatalf("a failed write left a checkpoint: %v, %v", ok, err)
	}
}

// failingSave is an engine whose Save fails.
type failingSave struct{ train.Engine }

func (failingSave) Save(string) error { return errors.New("disk full") }

// TestCheckpointProgress pins that a checkpoint write reports its progress
// to Config.OnProgress, ending with done = total.
func TestCheckpointProgress(t *testing.T) {
	nd := newCkptNode(t, t.TempDir(), 4, 3)
	var mu sync.Mutex
	var got []Progress
	nd.cfg.OnProgress = func(p Progress) { mu.Lock(); got = append(got, p); mu.Unlock() }
	if err := nd.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("no progress reported")
	}
	last := got[len(got)-1]
	if last.Work != "checkpoint" || last.Done != last.Total || last.Total != checkpointBytes(nd.params) || !strings.Contains(last.Detail, "step 4") {
		t.Fatalf("last progress %+v", last)
	}
}

// TestCheckpointBytes pins the size estimate: five float32 vectors.
func TestCheckpointBytes(t *testing.T) {
	for _, c := range []struct{ params, want int64 }{{0, 0}, {1, 20}, {1000, 20000}, {1 << 30, 20 << 30}} {
		if got := checkpointBytes(c.params); got != c.want {
			t.Errorf("checkpointBytes(%d) = %d, want %d", c.params, got, c.want)
		}
	}
}

// TestNewResumesCheckpoint pins node's whole resume path through New: a
// node of a sim device started on a home with a checkpoint holds its step,
// θ₀, v and hash; one started on an empty home holds the seeded model at
// step 0.
func TestNewResumesCheckpoint(t *testing.T) {
	home := t.TempDir()
	cfg := Config{Home: home, Run: "unit", Preset: "tiny", Device: "sim", SimStep: time.Nanosecond,
		StatusAddr: "off", Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Logger: unitLog}
	ctx := context.Background()
	n1, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n1.model.Step() != 0 || n1.model.Hash() != train.Hash(theta0Of(n1.model)) || n1.params != int64(len(theta0Of(n1.model))) {
		t.Fatalf("fresh node step %d, hash consistent %v", n1.model.Step(), n1.model.Hash() == train.Hash(theta0Of(n1.model)))
	}
	if !slices.Equal(n1.engine.Params(), theta0Of(n1.model)) {
		t.Fatal("fresh engine is not on θ₀")
	}
	n1.model.Advance(0, unitVec(5, len(theta0Of(n1.model)), 0.01))
	n1.model.Advance(1, unitVec(6, len(theta0Of(n1.model)), 0.01))
	if err := n1.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	step, hash, theta0, v := n1.model.Step(), n1.model.Hash(), slices.Clone(theta0Of(n1.model)), slices.Clone(momentumOf(n1.model))
	n1.host.Close()

	n2, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.host.Close()
	if n2.model.Step() != step || n2.model.Hash() != hash || !slices.Equal(theta0Of(n2.model), theta0) || !slices.Equal(momentumOf(n2.model), v) {
		t.Fatalf("resumed step %d hash %s, want %d %s", n2.model.Step(), n2.model.Hash(), step, hash)
	}
	if !slices.Equal(n2.engine.Params(), theta0) {
		t.Fatal("resumed engine is not on θ₀")
	}
	if n2.self != n1.self {
		t.Fatalf("peer id changed across restarts: %s → %s", n1.self, n2.self)
	}
}

// TestNewRefusesForeignCheckpoint pins that New fails, rather than starting
// fresh, when the home's checkpoint belongs to another run.
func TestNewRefusesForeignCheckpoint(t *testing.T) {
	home := t.TempDir()
	nd := newCkptNode(t, home, 3, 3)
	if err := nd.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Home: home, Run: "another", Preset: "tiny", Device: "sim", SimStep: time.Nanosecond,
		StatusAddr: "off", Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Logger: unitLog}
	n, err := New(context.Background(), cfg)
	if err == nil {
		n.host.Close()
		t.Fatal("New resumed another run's checkpoint")
	}
	if !strings.Contains(err.Error(), "belongs to run") {
		t.Fatalf("err %v", err)
	}
}

func ckptRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

func ckptWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeState(t *testing.T, dir string, st nodeState) {
	t.Helper()
	b, _ := json.Marshal(st)
	ckptWrite(t, filepath.Join(dir, nodeStateFile), string(b))
}

func writeOuter(t *testing.T, dir string, ts []train.Tensor) {
	t.Helper()
	if err := train.WriteSafetensors(filepath.Join(dir, outerFile), ts, nil); err != nil {
		t.Fatal(err)
	}
}
