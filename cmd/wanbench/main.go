// Command wanbench builds an emulated wide-area network on this machine (one
// network namespace per host, TUN devices joined by the userspace link
// emulator of cmd/linkemu) and runs commands or measurements in it. It needs
// root. Every run's namespaces are named iwan.<pid>.<random>.<host> and are
// removed when it ends, also on Ctrl-C; `wanbench cleanup` removes what a
// killed run left.
//
//	wanbench profiles                         list the geographies
//	wanbench run -profile usa -- CMD ARGS...  run CMD on every host until all exit
//	wanbench probe -profile global            measure every pair's RTT (and rate)
//	wanbench bench -rtt 100 -rate 1000        throughput through one link vs its ideal
//	wanbench config -profile usa              print a linkemu configuration
//	wanbench cleanup [-all]                   remove leftovers of earlier runs
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand; run gets the arguments after its name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{
	"profiles": {"list the built-in profiles (-json for the data)", cmdProfiles},
	"run":      {"build a profile's network and run a command on every host", cmdRun},
	"probe":    {"measure RTT (and optionally rate) between every pair of a profile", cmdProbe},
	"bench":    {"measure TCP throughput through one emulated link against its ideal", cmdBench},
	"config":   {"print the linkemu configuration of a profile", cmdConfig},
	"cleanup":  {"delete namespaces left by earlier runs", cmdCleanup},
	"nodes":    {"run intellect-node sim nodes in each profile and print the utilization table", cmdNodes},
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: wanbench <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "--cleanup" || name == "-cleanup" {
		name = "cleanup"
	}
	c, ok := commands[name]
	if !ok {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := c.run(ctx, os.Args[2:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wanbench:", err)
		os.Exit(1)
	}
}

// netFlags are the flags shared by the commands that build a network.
type netFlags struct {
	profile, profileFile string
	rateScale            float64
	modelBytes           float64
	outerStep            string
	mtu                  int
	seed                 uint64
	offload, verbose     bool
}

func (f *netFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.profile, "profile", "usa", "built-in profile: usa, usa-europe, global")
	fs.StringVar(&f.profileFile, "profile-file", "", "JSON profile file (overrides -profile)")
	fs.Float64Var(&f.rateScale, "rate-scale", 0, "multiply the profile's paper-scale rates by this (0: from -model-bytes/-outer-step, else 1)")
	fs.Float64Var(&f.modelBytes, "model-bytes", 0, "int8 bytes a node sends per outer step; with -outer-step sets -rate-scale (docs/wan.md)")
	fs.StringVar(&f.outerStep, "outer-step", "", "compute time of one outer step, e.g. 20s; with -model-bytes sets -rate-scale")
	fs.IntVar(&f.mtu, "mtu", 0, "MTU of the emulated links (default 1500)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the random loss")
	fs.BoolVar(&f.offload, "offload", true, "TCP segmentation offload on the TUN devices (false: every packet forwarded alone)")
	fs.BoolVar(&f.verbose, "v", false, "log progress to stderr")
}

func (f *netFlags) logger() *slog.Logger {
	if !f.verbose {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}
