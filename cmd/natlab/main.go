// Command natlab runs real intellect-node members in a NAT lab (package
// internal/nat: a public segment with the link emulator's WAN delays,
// home LANs behind cone and symmetric NAT routers) and reports whether they
// train together: outer steps, model hashes, how fast each pair connects
// directly, bytes through relays, and utilization against the same sites
// without NAT. It needs root; docs/nat.md describes the cases.
//
//	natlab -bin bin/intellect-node [-cases nonat,a,b,c,d] [-repeat 1] [-out docs/nat-results.md]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/internal/results"
	"github.com/intellect-node/intellect-node/internal/wan"
	"github.com/intellect-node/intellect-node/train"
)

// ErrRun is wrapped when a run did not end by itself.
var ErrRun = errors.New("natlab: run did not finish")

// config is everything natlab needs; flags fill it.
type config struct {
	Bin, Dir, Out string
	Cases         []string
	Repeat        int // runs of every case
	Preset        string
	Inner         int
	SimStep       time.Duration
	Outer         uint64
	Warmup        uint64
	EventStep     uint64        // cases c and d act once every member reached it
	Stall         time.Duration // a run ends when no member advances this long
	Profile       string
	NodeFlags     []string // added to every member's command line
	Log           *slog.Logger

	profile   wan.Profile
	rateScale float64
}

// runTimeout bounds one run: start-up, then every outer step at 2× its compute
// (a finished NAT run takes 20–35 s with the defaults; a limping one is cut).
func (c config) runTimeout() time.Duration {
	return 30*time.Second + time.Duration(c.Outer)*2*time.Duration(c.Inner)*c.SimStep
}

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
	c, err := parseFlags(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		fmt.Println("SKIP: natlab needs root (network namespaces, TUN devices, iptables)")
		return nil
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		return fmt.Errorf("natlab: iptables-restore not found (apt-get install iptables): %w", err)
	}
	specs, err := lookupCases(c.Cases)
	if err != nil {
		return err
	}
	runs := runAll(ctx, c, specs)
	rep := newReport(c, runs)
	rep.write(os.Stdout)
	if err := results.Write(os.Stdout, rep.rows(append([]string{"natlab"}, args...), time.Now())); err != nil {
		return err
	}
	if c.Out != "" {
		if werr := rep.writeMarkdown(c.Out, strings.Join(append([]string{"natlab"}, args...), " ")); werr != nil {
			return werr
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return rep.verdict()
}

// runAll runs every case c.Repeat times, stopping early when ctx ends.
// The reference runs too, so that the NAT-vs-no-NAT figure compares runs
// of the same invocation, and the cases take turns (run 1 of each, then
// run 2 of each, ...), so that a change in the machine's load over the
// invocation falls on every case alike. The results are grouped by case.
func runAll(ctx context.Context, c config, specs []caseSpec) []runResult {
	byCase := make([][]runResult, len(specs))
	for run := 1; run <= c.Repeat && ctx.Err() == nil; run++ {
		for i, cs := range specs {
			if ctx.Err() != nil {
				break
			}
			res := runCase(ctx, c, cs, run)
			fmt.Printf("natlab: case %s run %d: %s\n", cs.Name, run, res.oneLine())
			byCase[i] = append(byCase[i], res)
		}
	}
	var out []runResult
	for _, rs := range byCase {
		out = append(out, rs...)
	}
	return out
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("natlab", flag.ContinueOnError)
	var c config
	fs.StringVar(&c.Bin, "bin", "bin/intellect-node", "intellect-node binary")
	fs.StringVar(&c.Dir, "dir", "", "work dir for homes, logs and /v1/peers evidence (default: a new temp dir)")
	fs.StringVar(&c.Out, "out", "", "also write the results as markdown to this file")
	cases := fs.String("cases", "nonat,a,b,c,d", "comma-separated cases: nonat, a, b, c, d (docs/nat.md)")
	fs.IntVar(&c.Repeat, "repeat", 1, "runs of every case")
	fs.StringVar(&c.Preset, "preset", "tiny", "model preset")
	fs.IntVar(&c.Inner, "inner-steps", 10, "inner steps per outer step (H)")
	fs.DurationVar(&c.SimStep, "sim-step", 200*time.Millisecond, "simulated duration of one inner step")
	fs.Uint64Var(&c.Outer, "outer-steps", 8, "outer steps per run (--max-outer-steps)")
	fs.Uint64Var(&c.Warmup, "warmup", 2, "first outer steps left out of utilization and all-reduce time")
	fs.Uint64Var(&c.EventStep, "event-step", 3, "cases c and d kill or stop their member once every member reached this outer step")
	fs.DurationVar(&c.Stall, "stall", 25*time.Second, "end a run when no member advances for this long")
	fs.StringVar(&c.Profile, "profile", "usa", "wan profile giving the sites and their delays (4 sites)")
	nodeFlags := fs.String("node-flags", "", "space-separated flags added to every member's `start` command, e.g. \"--log-level debug\"")
	verbose := fs.Bool("v", false, "log the harness to stderr")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.Cases = strings.Split(*cases, ",")
	c.NodeFlags = strings.Fields(*nodeFlags)
	c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if *verbose {
		c.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return c, c.fill()
}

// fill validates the flags and derives the profile, rate scale, binary
// path and work dir.
func (c *config) fill() error {
	var err error
	if c.profile, err = wan.Lookup(c.Profile); err != nil {
		return err
	}
	if len(c.profile.Hosts) != 4 {
		return fmt.Errorf("natlab: profile %s has %d sites, the cases need 4", c.Profile, len(c.profile.Hosts))
	}
	if c.Repeat < 1 || c.Inner < 1 || c.SimStep <= 0 || c.Outer <= c.Warmup || c.EventStep >= c.Outer {
		return errors.New("natlab: need -repeat ≥ 1, positive -inner-steps and -sim-step, -warmup < -outer-steps, -event-step < -outer-steps")
	}
	m, err := train.Preset(c.Preset)
	if err != nil {
		return err
	}
	c.rateScale = wan.RateScale(float64(m.NumParams()), time.Duration(c.Inner)*c.SimStep)
	if c.Bin, err = filepath.Abs(c.Bin); err != nil {
		return err
	}
	if c.Dir == "" {
		c.Dir, err = os.MkdirTemp("", "natlab-")
	}
	return err
}
