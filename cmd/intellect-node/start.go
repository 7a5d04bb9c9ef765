package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/train"
)

func init() {
	register("start", "run a node: join (or start) a network and train", runStart)
}

// startFlags are the flags of `start` that do not map onto a node.Config
// field one to one.
type startFlags struct {
	boot, listen, announce multiFlag
	tokenFile              *string
	level                  *string
}

// newStartFlags defines the flags of `start` over c; their defaults are the
// node's (node.Default*), so that -h prints what the node will use.
func newStartFlags(c *node.Config) (*flag.FlagSet, *startFlags) {
	fs := newFlagSet("start", "[--bootstrap MULTIADDR]... [--listen MULTIADDR]... [flags]")
	var f startFlags
	fs.Var(&f.boot, "bootstrap", "`multiaddr` (with /p2p/) of a running member; repeatable; none starts a new network (and creates its run manifest)")
	fs.StringVar(&c.ManifestID, "manifest", "", "pin the run manifest `id` (64 hex digits) a joiner accepts from its bootstrap peers")
	fs.StringVar(&c.Tokenizer, "tokenizer", node.DefaultTokenizer, "`name` of the data's tokenizer, recorded in the run manifest")
	fs.StringVar(&c.Admission, "admission", node.AdmissionOpen, "who may join a new run, recorded in its manifest: open; psk (a private network: members need the key, see --psk-file); allowlist (members need a ticket from the creator: intellect-node admit)")
	fs.StringVar(&c.PSKFile, "psk-file", "", "the private run's key `file` (swarm.key format: intellect-node psk new); default <home>/"+node.PSKFile+" if it exists, where a creator with --admission psk and no key gets a new one")
	fs.StringVar(&c.TicketFile, "ticket", "", "this node's admission ticket `file` for an allowlist run (from intellect-node admit on the creator's home); default <home>/"+node.TicketFile+" if it exists")
	fs.Var(&f.listen, "listen", "libp2p listen `multiaddr`; repeatable (default "+strings.Join(node.DefaultListen(), ", ")+": TCP and QUIC on every IPv4 and IPv6 interface, QUIC not with a PSK; starts if one can be bound)")
	fs.Var(&f.announce, "announce", "a public `multiaddr` others can dial this node at (a port forward); repeatable; replaces the advertised addresses and makes the node public")
	fs.BoolVar(&c.NATPortMap, "nat-port-map", false, "ask the home router for a port mapping (UPnP / NAT-PMP)")
	fs.StringVar(&c.Reachability, "reachability", p2p.ReachAuto, "auto (public if a listening interface has a public address or --announce is given, else behind a NAT), public or private (docs/nat.md)")
	fs.StringVar(&c.Run, "run", node.DefaultRun, "training run `name`; nodes of other runs are ignored; in the run manifest")
	fs.StringVar(&c.Preset, "preset", node.DefaultPreset, "model `preset`: "+strings.Join(train.PresetNames(), ", ")+"; in the run manifest")
	fs.StringVar(&c.ConfigFile, "config", "", "model config JSON `file` (overrides --preset); in the run manifest")
	fs.StringVar(&c.Data, "data", "", "token shard `path` (file, directory or mixture spec); default: the embedded corpus; in the run manifest")
	fs.StringVar(&c.Home, "home", "", "the node's `dir`: identity key, run manifest, checkpoints, history.jsonl, api.addr (default ~/"+node.DefaultHome+")")
	fs.StringVar(&c.StatusAddr, "status", node.DefaultStatusAddr, "`address` of the local REST status API and web page; off disables it")
	fs.BoolVar(&c.Pprof, "pprof", false, "also serve Go's runtime profiles at /debug/pprof/ on the status API (go tool pprof http://ADDR/debug/pprof/heap)")
	f.tokenFile = fs.String("status-token-file", "", "`file` holding a secret (≥ 16 bytes) that opens the status API read-only to other machines (Authorization: Bearer, or the page's URL #token=); needed when --status is not loopback")
	fs.StringVar(&c.Device, "device", node.DefaultDevice, "compute `device`: cpu; cuda in a binary built with make build-cuda; sim (simulated compute, see --sim-step)")
	fs.DurationVar(&c.SimStep, "sim-step", 0, "with --device sim: the `duration` of one simulated inner step")
	fs.BoolVar(&c.Overlap, "overlap", node.DefaultOverlap, "average each outer step's pseudo-gradients while the next inner steps run, and apply the average during that phase (see --overlap-steps); --overlap=false waits for the average at each phase's end (blocking)")
	fs.IntVar(&c.OverlapSteps, "overlap-steps", 0, "with --overlap: apply the average after `N` inner steps of the next phase (0: as soon as it arrives)")
	q2, others := node.Q2Point, node.Int8Point
	fs.IntVar(&c.InnerSteps, "inner-steps", 0, "inner optimizer steps per outer step, H ("+codecsDefault(q2.InnerSteps, others.InnerSteps)+"); larger sends fewer bytes per token, converges worse (docs/traffic.md); in the run manifest")
	fs.Var(float32Flag{&c.OuterLR}, "outer-lr", "outer learning `rate`: θ ← θ − rate·(Δ̄ + μv) with v ← μv + Δ̄, Nesterov ("+codecsDefault(q2.OuterLR, others.OuterLR)+"); 1 with --outer-momentum 0 is plain averaging; in the run manifest")
	fs.Var(optFloat32{&c.OuterMomentum}, "outer-momentum", "outer Nesterov `momentum` μ in [0, 1), 0 for none ("+codecsDefault(q2.OuterMomentum, others.OuterMomentum)+"); in the run manifest")
	fs.Var(optFloat32{&c.WorkerMomentum}, "worker-momentum", "each member keeps Nesterov `momentum` μ in [0, 1) of its own pseudo-gradients and sends Δ + μv: with --outer-momentum 0 the same outer step, and attacks that hide in the honest spread cost less under robust averaging (docs/robust.md) ("+codecsDefault(q2.WorkerMomentum, others.WorkerMomentum)+"); in the run manifest")
	c.CloseFraction = new(float64(node.DefaultCloseFraction))
	fs.Float64Var(c.CloseFraction, "close-fraction", node.DefaultCloseFraction, "close each outer step once its Ready members' inner steps (each up to H) sum to this `fraction` of members × H: members still training end their phase and contribute the inner steps they finished; 0 waits for every member; in the run manifest")
	fs.IntVar(&c.MinMembers, "min-members", node.DefaultMinMembers, "hold the run's first outer step until `N` members agree on a ring; a creator records it in the run manifest and every member, joiners included, holds the first ring to it; a member's own higher value keeps it out of any smaller first ring (it joins after), a lower one is ignored")
	fs.Uint64Var(&c.MaxOuterSteps, "max-outer-steps", 0, "leave gracefully and exit after outer step `N` (0: run until stopped)")
	fs.IntVar(&c.Shards, "shards", node.DefaultShards, "`N` shards of the average: parallel rings (streams per neighbour) with --averaging mean, 2N streams per peer with robust; each shard quantizes its own blocks, so it changes the arithmetic; in the run manifest")
	fs.StringVar(&c.Codec, "codec", "", "how pseudo-gradients travel (default "+node.DefaultCodec+"; each codec brings its own defaults of --inner-steps, --outer-lr, --outer-momentum, --worker-momentum and --lr-decay, docs/traffic.md): int8; q4 or q2 (dense 4- or 2-bit, error feedback); topk (per 4096 values the --topk largest of the error-feedback buffer, --topk-bits each plus a 12-bit index); fp32 (for comparisons; implies --averaging mean); docs/allreduce.md; in the run manifest")
	fs.IntVar(&c.TopK, "topk", 0, fmt.Sprintf("with --codec topk: entries kept per 4096-value block (default %d); in the run manifest", node.DefaultTopK))
	fs.IntVar(&c.TopKBits, "topk-bits", 0, fmt.Sprintf("with --codec topk: bits per kept value, 2 or 4 (default %d); in the run manifest", collective.DefaultTopKBits))
	fs.Var(float32Flag{&c.FeedbackDecay}, "feedback-decay", fmt.Sprintf("with --codec q4, q2 or topk: the error-feedback buffer's decay β in (0, 1]: e ← β·e + Δ, send the compressed e, keep what was not sent (default %v); in the run manifest", node.DefaultFeedbackDecay))
	fs.BoolVar(&c.ResultFeedback, "result-feedback", false, "with --codec q4, q2 or topk and --averaging robust: segment owners add what encoding their result lost to their own error-feedback buffer; in the run manifest")
	fs.BoolVar(&c.FP32, "fp32", false, "--codec fp32: average in float32 (for comparisons; implies --averaging mean); in the run manifest")
	fs.BoolVar(&c.ErrorFeedback, "error-feedback", false, "with --codec int8: carry the quantization error into the next pseudo-gradient (the compressed codecs always do); in the run manifest")
	fs.StringVar(&c.Averaging, "averaging", node.DefaultAveraging, "how members average: robust (direct scatter; each segment's owner clips and combines every contribution, so one poisoned update cannot wreck the run; docs/robust.md) or mean (the ring's weighted mean; the default with --fp32); recorded in the run manifest")
	fs.StringVar(&c.Optimizer, "optimizer", node.DefaultOptimizer, "inner `optimizer`: adamw, or muon (Muon on the hidden matrices, AdamW on the rest; docs/convergence.md); recorded in the run manifest")
	fs.Float64Var(&c.LRDecay, "lr-decay", 0, fmt.Sprintf("the `fraction` of the schedule's inner steps (--max-outer-steps × H, else the preset's) over which the inner learning rate decays linearly to its minimum (default the codec's: %v with q2; the others the preset's, 0.2); larger H trains better with 0.5–1 (docs/traffic.md); in the run manifest",
		node.Q2Point.LRDecay))
	fs.StringVar(&c.RingOrder, "ring-order", node.DefaultRingOrder, "ring `order`: latency (maximise the slowest link, from measured round trips) or sorted (by peer id)")
	fs.Float64Var(&c.MaxSendRate, "max-send-rate", 0, "cap the all-reduce's send rate, in `bytes/s` (0: unlimited)")
	fs.IntVar(&c.CheckpointEvery, "checkpoint-every", node.DefaultCheckpointEvery, "write a checkpoint every `N` outer steps (0: only at exit)")
	f.level = fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	return fs, &f
}

func runStart(args []string) error {
	var c node.Config
	fs, f := newStartFlags(&c)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c.Bootstrap, c.Listen, c.Announce = f.boot, f.listen, f.announce
	c.Given = givenRunFlags(fs)
	if err := zeroMeansDefault(&c); err != nil {
		return err
	}
	if _, ok := c.Given["averaging"]; (c.FP32 || c.Codec == node.CodecFP32) && !ok {
		c.Averaging = node.AveragingMean // --fp32 alone: the ring's mean (robust averaging sends int8)
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = -1 // --checkpoint-every 0: only at exit
	}
	if *f.tokenFile != "" {
		b, err := readSmallFile(*f.tokenFile, 4096)
		if err != nil {
			return fmt.Errorf("--status-token-file: %w", err)
		}
		if c.StatusToken = strings.TrimSpace(string(b)); c.StatusToken == "" {
			return fmt.Errorf("--status-token-file %s is empty", *f.tokenFile)
		}
	}
	log, err := newLogger(os.Stderr, *f.level)
	if err != nil {
		return err
	}
	c.Logger = log
	c.OnProgress = progressBars()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.New(ctx, c)
	if err != nil && ctx.Err() != nil {
		// SIGINT or SIGTERM before the node started (a joiner still waiting
		// for its bootstrap peers): stopping is what was asked, not a failure.
		log.Info("stopped before the node started", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	return n.Run(ctx)
}

// runFlags maps the flags of `start` that the run manifest holds to the
// manifest field they set.
var runFlags = map[string]string{
	"run": "run", "preset": "preset", "config": "train.model", "data": "data", "tokenizer": "tokenizer",
	"inner-steps": "inner_steps", "outer-lr": "outer_lr", "outer-momentum": "outer_momentum", "worker-momentum": "worker_momentum",
	"shards": "compression.shards", "fp32": "compression.codec", "error-feedback": "compression.error_feedback",
	"codec": "compression.codec", "topk": "compression.topk", "topk-bits": "compression.topk_bits",
	"feedback-decay": "compression.feedback_decay", "result-feedback": "compression.result_feedback",
	"averaging": "averaging", "admission": "admission.policy", "optimizer": "train.optimizer",
	"lr-decay": "train.decay_frac",
}

// codecsDefault words a setting's default that node.CodecPoint gives: q2's
// and every other codec's.
func codecsDefault(q2, others any) string {
	return fmt.Sprintf("default the codec's: %v with q2, %v with the others", q2, others)
}

// zeroMeansDefault rejects an explicit 0 (c.Given) for the settings whose
// 0 is "the codec's" (node.CodecPoint): it would not mean what it says.
func zeroMeansDefault(c *node.Config) error {
	for _, s := range []struct {
		field string
		zero  bool
	}{{"inner_steps", c.InnerSteps == 0}, {"outer_lr", c.OuterLR == 0}, {"train.decay_frac", c.LRDecay == 0}} {
		if given, ok := c.Given[s.field]; ok && s.zero {
			return fmt.Errorf("%s 0: want > 0 (leave it out for the codec's default)", strings.Fields(given)[0])
		}
	}
	return nil
}

// givenRunFlags returns the run-manifest flags the user actually set
// (flag.FlagSet.Visit), by manifest field, with the flag as typed.
func givenRunFlags(fs *flag.FlagSet) map[string]string {
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		if field, ok := runFlags[f.Name]; ok {
			given[field] = "--" + f.Name + " " + f.Value.String()
		}
	})
	return given
}
