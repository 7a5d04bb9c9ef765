package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/intellect-node/intellect-node/mesh/account"
	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/train"
)

// The in-process sweep: DiLoCo (diloco.RunLocal, the reference the network
// is tested against) and the single-node baselines, run one after another in
// this process, several seeds each. Every run prints one JSON line (its eval
// curve); a summary table follows. It is the fast way to choose defaults:
// no processes, no network, the same numerics as the nodes (fp32 mean here;
// the int8 codec is checked separately by the network runs).
//
//	go run ./cmd/experiments sweep -runs 'single:k=1;single:k=4;diloco:m=4,lr=0.7,mu=0.9' -seeds 1,2,3

// sweepRun is one configuration of a sweep.
type sweepRun struct {
	Name    string  `json:"name"`
	Kind    string  `json:"kind"`                    // "single" or "diloco"
	M       int     `json:"m"`                       // DiLoCo workers
	K       int     `json:"k"`                       // single: gradient-accumulation factor (batch multiple)
	H       int     `json:"h"`                       // inner steps per outer step
	LR      float32 `json:"outer_lr"`                // DiLoCo outer learning rate
	Mu      float32 `json:"outer_mu"`                // DiLoCo outer momentum
	WMu     float32 `json:"worker_mu,omitempty"`     // DiLoCo worker momentum (diloco.Config.WorkerMomentum)
	InnerLR float64 `json:"inner_lr"`                // 0: the preset's
	Beta1   float64 `json:"inner_beta1,omitempty"`   // inner AdamW β1; 0: the preset's
	Warmup  int     `json:"inner_warmup,omitempty"`  // inner warmup steps; 0: the preset's
	Decay   float64 `json:"inner_decay,omitempty"`   // fraction of the steps the inner LR decays over; 0: the preset's
	Overlap int     `json:"overlap_steps,omitempty"` // overlapped DiLoCo (node --overlap) applying the average after this many inner steps
	// Optimizer is the inner optimizer (of a single run: its only one),
	// train.Options.Optimizer: "adamw" or "muon"; "": the preset's (AdamW).
	Optimizer string `json:"inner_optimizer,omitempty"`
	// Codec is how DiLoCo averages (codec.go): "fp32" (plain mean), "int8"
	// or "int8-ef" (the ring all-reduce), "robust" (--averaging robust), or
	// PATH-CODEC with PATH ring or robust and CODEC q4, q2 or topk.
	Codec  string `json:"codec"`
	Attack string `json:"attack,omitempty"` // DiLoCo: the last F workers attack (attack.go)
	F      int    `json:"f,omitempty"`
	// The compressed codecs' settings (0: the defaults of mesh/collective):
	// top-k entries per block, bits per kept value, error-feedback decay β,
	// the owners' result feedback (1 on, 2 off).
	TopK     int     `json:"topk,omitempty"`
	TopKBits int     `json:"topk_bits,omitempty"`
	Beta     float32 `json:"beta,omitempty"`
	RFB      int     `json:"rfb,omitempty"`
	// Slow is the last DiLoCo member's time per inner step, the others'
	// being 1 (diloco.LocalConfig.StepCost; 0: all equal), and Close the
	// close rule's fraction (0: every step waits for every member). The
	// run's outer steps are as many as fit the fast members' steps of
	// inner steps: equal wall-clock.
	Slow  int     `json:"slow,omitempty"`
	Close float64 `json:"close,omitempty"`
}

// sweepResult is one run of one seed.
type sweepResult struct {
	Run    sweepRun  `json:"run"`
	Seed   uint64    `json:"seed"`
	Data   string    `json:"data"`
	Tokens []int64   `json:"tokens"`
	Eval   []float64 `json:"eval"`
	// Hashes are the global model's hash (train.Hash) after each outer
	// step of a DiLoCo run: two runs trained the same models exactly when
	// they agree.
	Hashes []string `json:"hashes,omitempty"`
	// Final is the held-out loss of the final model on finalEvalBatches
	// batches (8× the curve's): the figure runs are compared by.
	Final float64 `json:"final"`
	Secs  float64 `json:"secs"`
	// With codec=robust: the owners' exclusions (account.Judge, the nodes' rule; attackers
	// are the last f workers), and the least cosine of an honest worker's
	// contribution with the others' median any owner saw.
	Exclusions   []sweepExclusion `json:"exclusions,omitempty"`
	MinHonestCos *float64         `json:"min_honest_cos,omitempty"`
	// SentPerInner and RecvPerInner are the all-reduce bytes (chunk
	// messages) a member sent and received per inner step, averaged over
	// the run's members and steps; Params the model's parameters.
	SentPerInner float64 `json:"sent_per_inner,omitempty"`
	RecvPerInner float64 `json:"recv_per_inner,omitempty"`
	Params       int64   `json:"params,omitempty"`
}

// sweepExclusion is the first exclusion of a worker by an in-memory owner.
type sweepExclusion struct {
	Step     uint64 `json:"step"`
	Owner    int    `json:"owner"`
	Worker   int    `json:"worker"`
	Evidence string `json:"evidence"`
}

func sweepMain(args []string) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	runs := fs.String("runs", "single:k=1;single:k=4;diloco:m=4", "runs separated by ';': single:k=K[,ilr=INNER_LR][,b1=INNER_BETA1][,wu=INNER_WARMUP][,decay=INNER_DECAY_FRACTION][,opt=adamw|muon] | diloco:m=M,h=H,lr=LR,mu=MU[,ilr=INNER_LR][,b1=INNER_BETA1][,wu=INNER_WARMUP][,decay=INNER_DECAY_FRACTION][,opt=adamw|muon][,codec=fp32|int8|int8-ef|robust|robust-q4|robust-q2|robust-q1|robust-topk][,ov=OVERLAP_STEPS][,atk=ATTACK,f=F]")
	seeds := fs.String("seeds", "1,2,3", "comma-separated seeds (init, data streams)")
	preset := fs.String("preset", "tiny", "model preset")
	data := fs.String("data", "default", "training data (as intellect-node train --data), or gosrc: the Go standard library's source as bytes")
	steps := fs.Int("steps", 600, "inner steps per worker (= the single baselines' steps)")
	h := fs.Int("h", node.Int8Point.InnerSteps, "default H")
	out := fs.String("out", "", "append JSON lines here too")
	workers := fs.Int("parallel", 1, "runs at the same time (each trainer runs two lanes; 1 suits 2 cores)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rs, err := parseRuns(*runs, *h)
	if err != nil {
		return err
	}
	ss, err := parseSeeds(*seeds)
	if err != nil {
		return err
	}
	src, err := openCorpus(*data)
	if err != nil {
		return err
	}
	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	var jobs []benchJob
	for _, r := range rs {
		for _, seed := range ss {
			jobs = append(jobs, benchJob{corpus: *data, seed: seed, run: r})
		}
	}
	return forEachParallel(jobs, *workers, func(j benchJob) (sweepResult, error) {
		res, err := sweepOne(context.Background(), j.run, j.seed, *preset, *steps, src)
		res.Data = j.corpus
		return res, err
	}, w)
}

func sweepOne(ctx context.Context, r sweepRun, seed uint64, preset string, steps int, src train.Source) (sweepResult, error) {
	opts, err := sweepOptions(r, seed, preset, steps)
	if err != nil {
		return sweepResult{}, err
	}
	res := sweepResult{Run: r, Seed: seed}
	start := time.Now()
	defer func() { res.Secs = time.Since(start).Seconds() }()
	var params []float32
	if r.Kind == "single" {
		opts.GradAccum = r.K
		opts.Worker = workerOf(seed, 0)
		params, err = res.single(opts, r.H, steps, src)
	} else {
		params, err = res.diloco(ctx, opts, r, seed, steps, src)
	}
	if err != nil {
		return res, err
	}
	res.Final, err = finalEval(opts, src, params)
	res.Secs = time.Since(start).Seconds()
	return res, err
}

// sweepOptions are the training options of run r.
func sweepOptions(r sweepRun, seed uint64, preset string, steps int) (train.Options, error) {
	opts, err := train.DefaultOptions(preset)
	if err != nil {
		return opts, err
	}
	opts.Seed = seed
	opts.TotalSteps = steps
	if r.InnerLR > 0 {
		opts.LR, opts.MinLR = r.InnerLR, r.InnerLR/10
	}
	if r.Beta1 > 0 {
		opts.Beta1 = r.Beta1
	}
	if r.Warmup > 0 {
		opts.WarmupSteps = r.Warmup
	}
	if r.Decay > 0 {
		opts.DecayFrac = r.Decay
	}
	if r.Optimizer != "" {
		opts.Optimizer = r.Optimizer
	}
	return opts, nil
}

// single trains one node for steps steps, evaluating every h, and returns
// its model.
func (res *sweepResult) single(opts train.Options, h, steps int, src train.Source) ([]float32, error) {
	t, err := train.NewTrainer(opts, src)
	if err != nil {
		return nil, err
	}
	for s := 1; s <= steps; s++ {
		st, err := t.Step()
		if err != nil {
			return nil, err
		}
		if s%h == 0 {
			ev, err := t.Eval()
			if err != nil {
				return nil, err
			}
			res.Tokens = append(res.Tokens, int64(s*st.Tokens))
			res.Eval = append(res.Eval, ev)
		}
	}
	return t.Params(), nil
}

// diloco runs DiLoCo in process (diloco.RunLocal) and returns the global
// model.
func (res *sweepResult) diloco(ctx context.Context, opts train.Options, r sweepRun, seed uint64, steps int, src train.Source) ([]float32, error) {
	cfg := diloco.LocalConfig{Options: opts, Inner: r.H, Outer: steps / r.H, OuterLR: r.LR, OuterMomentum: r.Mu, WorkerMomentum: r.WMu, Lag: r.Overlap}
	var err error
	if cfg.Averaging, err = res.averaging(r, seed); err != nil {
		return nil, err
	}
	for i := range r.M {
		cfg.Workers = append(cfg.Workers, workerOf(seed, i))
	}
	if r.Slow > 1 {
		cfg.StepCost = slices.Repeat([]int{1}, r.M)
		cfg.StepCost[r.M-1] = r.Slow
		cfg.CloseFraction = r.Close
		cfg.Outer = max(1, steps/int(cfg.StepTime()))
	}
	var sent, recv, memberSteps int64
	params, err := diloco.RunLocal(ctx, cfg, src, func(rec diloco.Record) {
		res.Tokens = append(res.Tokens, rec.Tokens)
		res.Eval = append(res.Eval, rec.EvalLoss)
		res.Hashes = append(res.Hashes, rec.Hash)
		sent, recv, memberSteps = sent+rec.BytesSent, recv+rec.BytesRecv, memberSteps+int64(rec.Members*r.H)
	})
	res.Params = opts.Model.NumParams()
	if memberSteps > 0 {
		res.SentPerInner, res.RecvPerInner = float64(sent)/float64(memberSteps), float64(recv)/float64(memberSteps)
	}
	return params, err
}

// averaging is run r's averaging: codec fp32 is the plain float32 mean,
// int8 and int8-ef the nodes' ring all-reduce, robust the direct scatter
// with the nodes' exclusion rule; an attack alters what the last F send.
func (res *sweepResult) averaging(r sweepRun, seed uint64) (diloco.Averaging, error) {
	a, err := codecAveraging(r)
	if err != nil {
		return a, err
	}
	if a.Scatter != nil {
		if a.Judge, err = account.NewJudge(*a.Scatter, res.watchOwners(r.M-r.F)); err != nil {
			return a, err
		}
	}
	if r.Attack != "" {
		var err error
		if a.Alter, err = attacked(r.Attack, r.M, r.F, seed); err != nil {
			return a, err
		}
	}
	return a, nil
}

// finalEvalBatches is the size of the final evaluation, in batches: the
// curve's 4 batches (4 096 tokens of the tiny preset) give a standard error
// of ≈ 1 % on a model's loss, too coarse to rank runs that differ by 1–3 %.
const finalEvalBatches = 32

// finalEval evaluates params on finalEvalBatches held-out batches.
func finalEval(opts train.Options, src train.Source, params []float32) (float64, error) {
	opts.EvalBatches, opts.GradAccum = finalEvalBatches, 1
	t, err := train.NewTrainer(opts, src)
	if err != nil {
		return 0, err
	}
	if err := t.SetParams(params); err != nil {
		return 0, err
	}
	return t.Eval()
}

// workerOf derives worker i's data-stream id for a seed.
func workerOf(seed uint64, i int) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(i))
	s := sha256.Sum256(b[:])
	return binary.LittleEndian.Uint64(s[:8])
}

func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q: %w", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseRuns(s string, h int) ([]sweepRun, error) {
	var out []sweepRun
	for _, spec := range strings.Split(s, ";") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		r, err := parseRun(spec, h)
		if err != nil {
			return nil, fmt.Errorf("run %q: %w", spec, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// parseRun parses one run of a sweep's -runs, h being the default H.
func parseRun(spec string, h int) (sweepRun, error) {
	kind, rest, _ := strings.Cut(spec, ":")
	r := sweepRun{Name: spec, Kind: kind, M: 1, K: 1, H: h, LR: 0.7, Mu: 0.9, Codec: "int8"}
	if kind != "single" && kind != "diloco" {
		return r, errors.New("kind must be single or diloco")
	}
	for _, kv := range strings.Split(rest, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return r, fmt.Errorf("%q is not key=value", kv)
		}
		if err := r.set(k, v); err != nil {
			return r, err
		}
	}
	if r.M < 1 || r.K < 1 || r.H < 1 {
		return r, errors.New("m, k, h must be ≥ 1")
	}
	return r, nil
}

// set sets the run's key k to v.
func (r *sweepRun) set(k, v string) error {
	switch k {
	case "codec":
		r.Codec = v
		_, err := codecAveraging(*r)
		return err
	case "opt":
		if v != train.OptimizerAdamW && v != train.OptimizerMuon {
			return fmt.Errorf("optimizer %q: want %s or %s", v, train.OptimizerAdamW, train.OptimizerMuon)
		}
		r.Optimizer = v
		return nil
	case "atk":
		if _, ok := attacks[v]; !ok {
			return fmt.Errorf("attack %q: want one of %v", v, attackNames())
		}
		r.Attack, r.F = v, max(r.F, 1)
		return nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	return r.setNumber(k, f)
}

// setNumber sets the run's numeric key k to f.
func (r *sweepRun) setNumber(k string, f float64) error {
	switch k {
	case "m":
		r.M = int(f)
	case "k":
		r.K = int(f)
	case "h":
		r.H = int(f)
	case "lr":
		r.LR = float32(f)
	case "mu":
		r.Mu = float32(f)
	case "wmu":
		r.WMu = float32(f)
	case "ilr":
		r.InnerLR = f
	case "b1":
		r.Beta1 = f
	case "wu":
		r.Warmup = int(f)
	case "decay":
		if !(f > 0 && f <= 1) {
			return fmt.Errorf("decay %v: want a fraction in (0, 1]", f)
		}
		r.Decay = f
	case "ov":
		r.Overlap = int(f)
	case "slow":
		r.Slow = int(f)
	case "close":
		r.Close = f
	case "f":
		r.F = int(f)
	case "tk", "tb", "beta", "rfb":
		r.setCodecNumber(k, f)
	default:
		return fmt.Errorf("unknown key %q", k)
	}
	return nil
}

// watchOwners records, from the in-memory owners' views, the first
// exclusion of each worker and the least cosine of the first honest ones.
func (res *sweepResult) watchOwners(honest int) func(account.OwnerView) {
	seen := map[int]bool{}
	return func(v account.OwnerView) {
		for _, w := range slices.Sorted(maps.Keys(v.Excluded)) {
			if ev := v.Excluded[w]; !seen[w] {
				seen[w] = true
				res.Exclusions = append(res.Exclusions, sweepExclusion{v.Step, v.Owner, w, ev})
				fmt.Fprintf(os.Stderr, "sweep: step %d: owner %d excluded worker %d: %s\n", v.Step, v.Owner, w, ev)
			}
		}
		if v.Owner >= honest {
			return
		}
		for w, c := range v.Cos[:min(honest, len(v.Cos))] {
			if w != v.Owner && c != 0 && (res.MinHonestCos == nil || c < *res.MinHonestCos) {
				res.MinHonestCos = &c
			}
		}
	}
}
