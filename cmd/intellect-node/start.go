package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/intellect-node/intellect-node/node"
)

func init() {
	register("start", "run a node: join (or start) a network and train", runStart)
}

func runStart(args []string) error {
	fs := newFlagSet("start", "[--bootstrap MULTIADDR]... [--listen MULTIADDR]... [flags]")
	var c node.Config
	var boot, listen multiFlag
	fs.Var(&boot, "bootstrap", "`multiaddr` (with /p2p/) of a running member; repeatable; none starts a new network")
	fs.Var(&listen, "listen", "libp2p listen `multiaddr`; repeatable (default /ip4/0.0.0.0/tcp/4001)")
	fs.StringVar(&c.Run, "run", "default", "training run `name`; nodes of other runs are ignored")
	fs.StringVar(&c.Preset, "preset", "tiny", "model `preset`: tiny, small, 150m, 1b")
	fs.StringVar(&c.ConfigFile, "config", "", "model config JSON `file` (overrides --preset)")
	fs.StringVar(&c.Data, "data", "", "token shard `path` (file, directory or mixture spec); default: the embedded corpus")
	fs.StringVar(&c.Home, "home", "", "`dir` for the identity key and checkpoints (default ~/.intellect-node)")
	fs.StringVar(&c.StatusAddr, "status", "127.0.0.1:8642", "`address` of the local REST status API and web page; off disables it")
	tokenFile := fs.String("status-token-file", "", "`file` holding a secret (≥ 16 bytes) that opens the status API read-only to other machines (Authorization: Bearer, or the page's URL #token=); needed when --status is not loopback")
	fs.StringVar(&c.Device, "device", "cpu", "compute `device`: cpu; cuda in a binary built with make build-cuda; sim (simulated compute, see --sim-step)")
	fs.DurationVar(&c.SimStep, "sim-step", 0, "with --device sim: the `duration` of one simulated inner step")
	fs.BoolVar(&c.Overlap, "overlap", false, "overlap the all-reduce of each outer step with the next inner steps")
	fs.IntVar(&c.OverlapSteps, "overlap-steps", 0, "with --overlap: apply the average after `N` inner steps of the next phase (0: as soon as it arrives)")
	fs.IntVar(&c.InnerSteps, "inner-steps", node.DefaultInnerSteps, "inner AdamW steps per outer step (H); larger sends fewer bytes per token, converges worse (docs/convergence.md)")
	outerLR := fs.Float64("outer-lr", node.DefaultOuterLR, "outer (Nesterov) learning `rate`; every member must use the same")
	fs.Var(optFloat32{&c.OuterMomentum}, "outer-momentum", fmt.Sprintf("outer Nesterov `momentum` in [0, 1), 0 for none (default %v, %v with --overlap); every member must use the same",
		node.DefaultOuterMomentum, node.DefaultOverlapOuterMomentum))
	fs.IntVar(&c.MinMembers, "min-members", 1, "hold the first outer step until `N` members agree on a ring")
	fs.Uint64Var(&c.MaxOuterSteps, "max-outer-steps", 0, "leave gracefully and exit after outer step `N` (0: run until stopped)")
	fs.IntVar(&c.Shards, "shards", 4, "parallel rings (streams per neighbour) of the all-reduce")
	fs.BoolVar(&c.FP32, "fp32", false, "all-reduce in float32 instead of int8 (4× the traffic; for comparisons)")
	fs.BoolVar(&c.ErrorFeedback, "error-feedback", false, "carry the int8 quantization error into the next pseudo-gradient")
	fs.StringVar(&c.RingOrder, "ring-order", "latency", "ring `order`: latency (maximise the slowest link, from measured round trips) or sorted (by peer id)")
	fs.Float64Var(&c.MaxSendRate, "max-send-rate", 0, "cap the all-reduce's send rate, in `bytes/s` (0: unlimited)")
	fs.IntVar(&c.CheckpointEvery, "checkpoint-every", 10, "write a checkpoint every `N` outer steps")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c.Bootstrap, c.Listen = boot, listen
	c.OuterLR = float32(*outerLR)
	if *tokenFile != "" {
		b, err := readSmallFile(*tokenFile, 4096)
		if err != nil {
			return fmt.Errorf("--status-token-file: %w", err)
		}
		if c.StatusToken = strings.TrimSpace(string(b)); c.StatusToken == "" {
			return fmt.Errorf("--status-token-file %s is empty", *tokenFile)
		}
	}
	log, err := newLogger(os.Stderr, *level)
	if err != nil {
		return err
	}
	c.Logger = log
	c.OnProgress = progressBars()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.New(ctx, c)
	if err != nil {
		return err
	}
	return n.Run(ctx)
}
