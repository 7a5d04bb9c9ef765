package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/train"
)

func init() {
	register("train", "train a model locally on one machine (no network)", runTrain)
}

// trainFlags are the flags of `intellect-node train`.
type trainFlags struct {
	preset, config, data, home string
	steps, batch, seq, accum   int
	lr                         float64
	seed, worker               uint64
	resume, json, info         bool
	decay                      float64
	optimizer                  string
	logEvery, evalEvery        int
	saveEvery, keep            int
}

func runTrain(args []string) error {
	var f trainFlags
	fs := newFlagSet("train", "[--preset NAME | --config FILE] [--data PATH] [--home DIR] [--steps N] [--resume] [flags]")
	fs.StringVar(&f.preset, "preset", "tiny", fmt.Sprintf("model preset %v", train.PresetNames()))
	fs.StringVar(&f.config, "config", "", "model config JSON file (overrides --preset's model)")
	fs.StringVar(&f.data, "data", "default", "training data: default, a shard file, a directory of *.tok shards or a mixture .json")
	fs.StringVar(&f.home, "home", ".intellect-train", "directory for checkpoints (HOME/checkpoints/step-N)")
	fs.IntVar(&f.steps, "steps", 0, "train until this many steps (default: the preset's schedule length)")
	fs.IntVar(&f.batch, "batch", 0, "rows per micro-batch (default: preset)")
	fs.IntVar(&f.seq, "seq", 0, "tokens per row (default: preset)")
	fs.IntVar(&f.accum, "grad-accum", 0, "micro-batches per step (default: preset)")
	fs.Float64Var(&f.lr, "lr", 0, "peak learning rate (default: preset)")
	fs.Float64Var(&f.decay, "lr-decay", 0, "the `fraction` of the steps over which the learning rate decays linearly to its minimum (default: preset, 0.2)")
	fs.StringVar(&f.optimizer, "optimizer", node.DefaultOptimizer, "optimizer: muon (Muon on the hidden matrices, AdamW on the rest; a node's default too) or adamw")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of init and data sampling")
	fs.Uint64Var(&f.worker, "worker", 0, "worker id (selects this worker's data stream)")
	fs.BoolVar(&f.resume, "resume", false, "continue from the newest checkpoint under --home")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per progress line")
	fs.BoolVar(&f.info, "info", false, "validate the model config, print it with its parameter count and exit")
	fs.IntVar(&f.logEvery, "log-every", 10, "progress line every N steps")
	fs.IntVar(&f.evalEvery, "eval-every", 50, "held-out loss every N steps")
	fs.IntVar(&f.saveEvery, "save-every", 200, "checkpoint every N steps")
	fs.IntVar(&f.keep, "keep", 3, "checkpoints kept")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rc, err := f.runConfig()
	if err != nil {
		return err
	}
	if f.info {
		return printModelInfo(rc.Options)
	}
	data, err := train.OpenSource(f.data)
	if err != nil {
		return err
	}
	if rc.Options.Model, err = train.FitVocab(rc.Options.Model, data, f.config == ""); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return train.Run(ctx, rc, data)
}

func (f trainFlags) runConfig() (train.RunConfig, error) {
	o, err := train.DefaultOptions(f.preset)
	if err != nil {
		return train.RunConfig{}, err
	}
	if f.config != "" {
		if o.Model, err = train.LoadConfig(f.config); err != nil {
			return train.RunConfig{}, err
		}
		o.Seq = min(o.Seq, o.Model.SeqLen)
	}
	setIf(&o.Batch, f.batch)
	setIf(&o.Seq, f.seq)
	setIf(&o.GradAccum, f.accum)
	setIf(&o.TotalSteps, f.steps)
	if f.lr > 0 {
		o.LR, o.MinLR = f.lr, f.lr/10
	}
	if f.decay != 0 {
		o.DecayFrac = f.decay
	}
	if f.optimizer != "" && f.optimizer != train.OptimizerAdamW {
		o.Optimizer = f.optimizer
	}
	o.Seed, o.Worker = f.seed, f.worker
	return train.RunConfig{
		Options: o, Steps: o.TotalSteps, Home: f.home, Resume: f.resume, JSON: f.json,
		LogEvery: f.logEvery, EvalEvery: f.evalEvery, SaveEvery: f.saveEvery, Keep: f.keep, Out: os.Stdout,
	}, nil
}

func setIf(dst *int, v int) {
	if v > 0 {
		*dst = v
	}
}

// printModelInfo prints the validated model config, its parameter count and
// its training FLOPs per token (at the configured sequence length).
func printModelInfo(o train.Options) error {
	c := o.Model
	if err := c.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	fmt.Printf("%s\nparameters: %d (%.3g)\ntraining GFLOP per token at seq %d: %.3g\n",
		b, c.NumParams(), float64(c.NumParams()), c.SeqLen, c.StepFLOPs(1, c.SeqLen)/float64(c.SeqLen)/1e9)
	return nil
}
