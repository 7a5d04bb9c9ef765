// Command soak runs real intellect-node members for an hour (or
// SOAK_MINUTES) in network namespaces joined by the link emulator, injects
// a seeded schedule of faults (kill -9 and restart, joins, leaves,
// partitions, link flaps and rate drops, a full disk during a checkpoint,
// a skewed clock, a donor killed mid-transfer, a storm of joiners), records
// every member's REST API, and fails on a split model after the heal
// window, a stall, a slow pace, a failed resume, growing resources, or a
// panic, race or unhandled error in the logs. It needs root; docs/soak.md
// describes it.
//
//	soak run -bin bin/intellect-node-soak [-minutes 60] [-seed N]
//	soak overlay -dir DIR      write the clock-skew build overlay, print its path
//	soak cleanup [-all]        remove namespaces and mounts of dead soaks
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/internal/soak"
	"github.com/intellect-node/intellect-node/internal/wan"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := mainErr(ctx, os.Args[1:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: soak run|overlay|cleanup [flags] (soak run -h for the run's flags)")
	}
	switch args[0] {
	case "run":
		return cmdRun(ctx, args[1:])
	case "overlay":
		return cmdOverlay(args[1:])
	case "cleanup":
		return cmdCleanup(args[1:])
	}
	return fmt.Errorf("soak: unknown command %q (run, overlay, cleanup)", args[0])
}

func cmdOverlay(args []string) error {
	fs := flag.NewFlagSet("overlay", flag.ContinueOnError)
	dir := fs.String("dir", "bin/.soak-overlay", "where to write the overlay's files (a dot directory: go ./... and the function-length test skip it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	path, err := soak.WriteClockOverlay(runtime.GOROOT(), abs)
	if err == nil {
		fmt.Println(path)
	}
	return err
}

func cmdCleanup(args []string) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	all := fs.Bool("all", false, "also remove what soaks still running made")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ns, err := wan.Cleanup(wan.DefaultPrefix, *all, log)
	mounts, merr := soak.CleanupMounts(*all)
	fmt.Printf("soak cleanup: deleted %d namespaces, unmounted %d tmpfs\n", len(ns), len(mounts))
	return errors.Join(err, merr)
}

// envOr returns the environment variable's value, or def when unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func cmdRun(ctx context.Context, args []string) error {
	c, err := parseRun(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		fmt.Println("SKIP: soak needs root (network namespaces, TUN devices, tmpfs mounts)")
		return nil
	}
	rep, err := run(ctx, c)
	if rep != nil {
		finish(c, rep, args)
	}
	if err != nil {
		return err
	}
	if v := rep.Verdict(); len(v) > 0 {
		return fmt.Errorf("soak: FAIL (seed %d, replay with SOAK_SEED=%d): %d failures, evidence in %s", c.Seed, c.Seed, len(v), c.Dir)
	}
	return nil
}

func parseRun(args []string) (config, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var c config
	minutes, err := strconv.ParseFloat(envOr("SOAK_MINUTES", "60"), 64)
	if err != nil {
		return c, fmt.Errorf("soak: SOAK_MINUTES: %w", err)
	}
	seed, err := strconv.ParseUint(envOr("SOAK_SEED", strconv.FormatUint(rand.Uint64()%1_000_000, 10)), 10, 64)
	if err != nil {
		return c, fmt.Errorf("soak: SOAK_SEED: %w", err)
	}
	fs.StringVar(&c.Bin, "bin", "bin/intellect-node-soak", "intellect-node binary (make soak builds it with -race and the clock overlay)")
	fs.StringVar(&c.LongLivedBin, "long-lived-bin", "", "binary of the long-lived members, whose resources are judged (make soak builds it without -race: the race runtime's own memory grows in long-running programs); default -bin")
	fs.StringVar(&c.Dir, "dir", "", "work dir: homes, logs, samples (default: a new temp dir)")
	fs.Float64Var(&c.Minutes, "minutes", minutes, "length of the run, setup excluded (default $SOAK_MINUTES or 60)")
	fs.Uint64Var(&c.Seed, "seed", seed, "seed of the fault schedule (default $SOAK_SEED or random; printed)")
	fs.IntVar(&c.Slots, "slots", 14, "namespaces, one member each at most (a storm and the scenarios' joiners may fill them)")
	fs.IntVar(&c.Initial, "members", 8, "members when the faults start; churn keeps between this and -max-members")
	fs.IntVar(&c.Max, "max-members", 12, "most members churn's joins lead to")
	fs.IntVar(&c.LongLived, "long-lived", 2, "members never killed nor made to leave (their resources are judged)")
	fs.DurationVar(&c.SimStep, "sim-step", 400*time.Millisecond, "--sim-step of the members (--device sim): the default codec's H of them make an outer step's compute (26: 10.4 s)")
	fs.DurationVar(&c.HealWindow, "heal-window", 60*time.Second, "after a partition heals, how long its sides may still differ (also the quiet phase at the end)")
	fs.StringVar(&c.Profile, "profile", "usa", "wan profile widened to -slots hosts")
	nodeFlags := fs.String("node-flags", "", "space-separated flags added to every member's start command, e.g. \"--log-level debug\"")
	out := fs.String("out", "", "also write the report to this file")
	verbose := fs.Bool("v", false, "log the harness to stderr")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.Out, c.NodeFlags = *out, strings.Fields(*nodeFlags)
	c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if *verbose {
		c.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return c, c.fill()
}
