// Command experiments runs the convergence experiments (docs/convergence.md) as real
// intellect-node processes on 127.0.0.1: 4-node DiLoCo (blocking int8,
// overlapped int8, blocking fp32, int8 with error feedback) against one node
// trained alone with a 4× batch at equal tokens. It collects every node's
// history.jsonl, writes CSV files and hand-written SVG plots of held-out loss
// against tokens, and prints a summary table.
//
//	go run ./cmd/experiments -out docs/figures -inner 20 -outer 30
//	go run ./cmd/experiments -replot /tmp/conv   # plots and table from a finished run's directory
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	out, work, bin, run, preset, only, replot string
	nodes, inner, outer, parallel             int
	timeout                                   time.Duration
}

func main() {
	var sub func([]string) error
	if len(os.Args) > 1 {
		sub = map[string]func([]string) error{"sweep": sweepMain, "bench": benchMain, "traffic": trafficMain, "wire": wireMain, "clock": clockMain}[os.Args[1]]
	}
	if sub != nil {
		if err := sub(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "experiments %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.out, "out", "docs/figures", "directory for the CSV files and SVG plots")
	flag.StringVar(&o.work, "work", "", "directory for node homes, logs and histories (default: a new temporary one)")
	flag.StringVar(&o.bin, "bin", "", "intellect-node binary to run (default: go build ./cmd/intellect-node into the work directory)")
	flag.StringVar(&o.run, "run", "convergence", "training run name (it seeds the shared model initialisation)")
	flag.StringVar(&o.preset, "preset", "tiny", "model preset")
	flag.StringVar(&o.only, "only", "", "comma-separated configuration names to run (default: all of "+strings.Join(configNames(), ",")+")")
	flag.StringVar(&o.replot, "replot", "", "do not train: rebuild CSV, plots and table from this earlier -work directory")
	flag.IntVar(&o.nodes, "nodes", 4, "nodes of each DiLoCo configuration (the single node gets this many times the batch)")
	flag.IntVar(&o.inner, "inner", 20, "inner steps per outer step (H)")
	flag.IntVar(&o.outer, "outer", 30, "outer steps of every configuration")
	flag.IntVar(&o.parallel, "parallel", 1, "configurations run at the same time (their losses at equal tokens do not depend on speed)")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "limit on one configuration's run")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "experiments:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	if o.nodes < 2 || o.inner < 1 || o.outer < 1 || o.parallel < 1 {
		return fmt.Errorf("want -nodes ≥ 2, -inner ≥ 1, -outer ≥ 1, -parallel ≥ 1")
	}
	cfgs, err := selectConfigs(o.only)
	if err != nil {
		return err
	}
	setup, err := newSetup(o)
	if err != nil {
		return err
	}
	if o.replot != "" {
		setup.work = o.replot
	} else {
		if err := prepare(ctx, &o, setup, log); err != nil {
			return err
		}
		if err := runConfigs(ctx, o, setup, cfgs, log); err != nil {
			return err
		}
	}
	results, err := collect(setup, cfgs)
	if err != nil {
		return err
	}
	return report(o, setup, results, os.Stdout)
}

// prepare creates the work directory, builds the binary and the pinned node
// identities (so every configuration's node i draws the same data stream).
func prepare(ctx context.Context, o *options, s *setup, log *slog.Logger) error {
	if o.work == "" {
		d, err := os.MkdirTemp("", "intellect-conv-")
		if err != nil {
			return err
		}
		o.work = d
	}
	s.work = o.work
	if err := os.MkdirAll(s.work, 0o755); err != nil {
		return err
	}
	if o.bin == "" {
		o.bin = filepath.Join(s.work, "intellect-node")
		if err := goBuild(ctx, o.bin); err != nil {
			return err
		}
	}
	s.bin = o.bin
	if err := makeIdentities(s); err != nil {
		return err
	}
	log.Info("experiments", "work", s.work, "nodes", o.nodes, "H", o.inner, "outer_steps", o.outer,
		"params", s.params, "tokens_per_inner_step", s.tokensPerStep)
	return nil
}

// runConfigs runs the configurations, o.parallel at a time, and returns the
// first failure after all have ended.
func runConfigs(ctx context.Context, o options, s *setup, cfgs []config, log *slog.Logger) error {
	sem := make(chan struct{}, o.parallel)
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := runConfig(ctx, o, s, c, log); err != nil {
				errs[i] = fmt.Errorf("%s: %w", c.Name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
