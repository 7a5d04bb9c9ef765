package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/internal/results"
	"github.com/intellect-node/intellect-node/internal/soak"
	"github.com/intellect-node/intellect-node/internal/wan"
	"github.com/intellect-node/intellect-node/train"
)

// config is everything a run needs; flags fill it.
type config struct {
	Bin, Dir, Out, Profile  string
	LongLivedBin            string // the long-lived members' binary; Bin when empty
	NodeFlags               []string
	Minutes                 float64
	Seed                    uint64
	Slots, Initial, Max     int
	LongLived               int
	SimStep, HealWindow     time.Duration
	Log                     *slog.Logger
	profile                 wan.Profile
	rateScale               float64
	baseline, faults, quiet time.Duration
}

// Phases: the fault-free phase is a tenth of the run, within these bounds;
// the quiet phase at the end is the heal window and a final stretch in
// which every member must hold one model.
const (
	minBaseline  = 45 * time.Second
	maxBaseline  = 5 * time.Minute
	finalStretch = 30 * time.Second
	// setupTimeout bounds the start of the initial members.
	setupTimeout = 5 * time.Minute
)

// fill validates the flags and derives the profile, rate scale, phases,
// binary path and work dir.
func (c *config) fill() error {
	p, err := wan.Lookup(c.Profile)
	if err != nil {
		return err
	}
	if c.profile, err = wan.Widen(p, c.Slots); err != nil {
		return err
	}
	m, err := train.Preset("tiny")
	if err != nil {
		return err
	}
	// The shipped H (5) with the simulated inner step: int8 bytes ≈ params.
	c.rateScale = wan.RateScale(float64(m.NumParams()), 5*c.SimStep)
	total := time.Duration(c.Minutes * float64(time.Minute))
	c.baseline = min(max(total/10, minBaseline), maxBaseline)
	c.quiet = c.HealWindow + finalStretch
	c.faults = total - c.baseline - c.quiet
	// Members resume from their homes: an old run's would be resumed, not
	// started fresh.
	if ents, err := os.ReadDir(c.Dir); c.Dir != "" && err == nil && len(ents) > 0 {
		return fmt.Errorf("soak: -dir %s is not empty: a soak starts its members from fresh homes; remove it or name another", c.Dir)
	}
	if c.Max > c.Slots {
		return fmt.Errorf("soak: -max-members %d over -slots %d", c.Max, c.Slots)
	}
	if err := c.planConfig(0).Validate(); err != nil {
		return fmt.Errorf("%w (-minutes %.1f leaves %v of faults)", err, c.Minutes, c.faults)
	}
	if c.Bin, err = filepath.Abs(c.Bin); err != nil {
		return err
	}
	if c.LongLivedBin == "" {
		c.LongLivedBin = c.Bin
	} else if c.LongLivedBin, err = filepath.Abs(c.LongLivedBin); err != nil {
		return err
	}
	if c.Dir == "" {
		c.Dir, err = os.MkdirTemp("", "soak-")
	}
	return err
}

// planConfig is the plan's configuration with the fault phase starting at
// start (the end of setup plus the fault-free phase).
func (c *config) planConfig(start time.Duration) soak.PlanConfig {
	return soak.PlanConfig{Seed: c.Seed, Faults: soak.Interval{From: start, To: start + c.faults},
		Initial: c.Initial, Min: c.Initial, Max: c.Max, LongLived: c.LongLived}
}

// run builds the network, starts the initial members, runs the phases
// and returns the report. Everything it made is removed before it returns.
func run(ctx context.Context, c config) (*soak.Report, error) {
	fmt.Printf("soak: seed %d (replay: SOAK_SEED=%d), %.1f min, %d slots, work dir %s\n", c.Seed, c.Seed, c.Minutes, c.Slots, c.Dir)
	for _, d := range []string{"homes", "logs"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	n, err := wan.Start(ctx, c.profile, wan.Options{RateScale: c.rateScale, Seed: c.Seed, Log: c.Log})
	if err != nil {
		return nil, err
	}
	r := newRunner(c, n)
	defer r.close()
	pctx, stopPoll := context.WithCancel(context.Background())
	var pollWG sync.WaitGroup
	pollWG.Go(func() { r.poll(pctx) })
	err = r.phases(ctx)
	stopPoll()
	pollWG.Wait()
	if err == nil {
		r.stopAll()
	}
	r.close()
	r.scanLogs()
	return r.report(), err
}

// phases runs setup, the fault-free phase, the faults and the quiet phase.
func (r *runner) phases(ctx context.Context) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	setupEnd := r.now()
	r.rep.Baseline = soak.Interval{From: setupEnd, To: setupEnd + r.c.baseline}
	plan, err := soak.Plan(r.c.planConfig(r.rep.Baseline.To))
	if err != nil {
		return err
	}
	r.rep.Faults = soak.Interval{From: r.rep.Baseline.To, To: r.rep.Baseline.To + r.c.faults}
	r.rep.Quiet = soak.Interval{From: r.rep.Faults.To, To: r.rep.Faults.To + r.c.quiet}
	fmt.Printf("soak: setup took %v; fault-free until %v, faults until %v, quiet until %v; plan %v\n",
		setupEnd.Round(time.Second), r.rep.Baseline.To, r.rep.Faults.To, r.rep.Quiet.To, soak.Count(plan))
	if err := r.sleepUntil(ctx, r.rep.Baseline.To); err != nil {
		return err
	}
	r.inject(ctx, plan)
	if err := r.sleepUntil(ctx, r.rep.Faults.To); err != nil {
		return err
	}
	r.events.Wait() // partitions, restarts and scenarios end by the quiet phase
	if late := r.now() - r.rep.Quiet.From; late > 5*time.Second {
		// Graceful leaves (a storm's) can take that long on a loaded machine;
		// the final stretch starts a heal window after the last fault ended.
		r.locked(func() { r.note("faults ran %v into the quiet phase", late.Round(time.Second)) })
	}
	return r.sleepUntil(ctx, r.rep.Quiet.To)
}

// sleepUntil waits until t on the run's clock, or ctx's end.
func (r *runner) sleepUntil(ctx context.Context, t time.Duration) error {
	d := t - r.now()
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// setup starts the first slot (the run's creator), then the other initial
// members bootstrapping from it, and waits until one ring holds them all.
func (r *runner) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	r.mu.Lock()
	err := r.startFresh(0, 0, false)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if err := r.waitFor(ctx, func() bool { return r.slots[0].id != "" }); err != nil {
		return fmt.Errorf("soak: creator's status: %w", err)
	}
	r.mu.Lock()
	for i := 1; i < r.c.Initial && err == nil; i++ {
		err = r.startFresh(i, 0, i == diskSlot)
	}
	r.slots[diskSlot].busy = true // churn leaves it alone until its disk fills (doDiskFull)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	err = r.waitFor(ctx, func() bool { return r.ringOfAll() })
	if err != nil {
		return fmt.Errorf("soak: the %d initial members never formed one ring: %w", r.c.Initial, err)
	}
	return nil
}

// ringOfAll reports whether every initial member runs and the last ring
// each decided held them all. Lock held.
func (r *runner) ringOfAll() bool {
	for _, s := range r.slots[:r.c.Initial] {
		if s.state != up || len(s.status.Members) != r.c.Initial {
			return false
		}
	}
	return true
}

// waitFor polls cond (under the lock) every 200 ms until it holds.
func (r *runner) waitFor(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// finish prints the report, its docs/results.md rows, and writes it to
// c.Out if set.
func finish(c config, rep *soak.Report, args []string) {
	rep.Write(os.Stdout)
	rows := rep.Rows()
	cmd := []string{fmt.Sprintf("SOAK_MINUTES=%g SOAK_SEED=%d soak run", c.Minutes, c.Seed)}
	results.Stamp(rows, append(cmd, args...), c.Bin, time.Now())
	results.Write(os.Stdout, rows)
	if c.Out == "" {
		return
	}
	f, err := os.Create(c.Out)
	if err == nil {
		rep.Write(f)
		err = errors.Join(results.Write(f, rows), f.Close())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak: -out:", err)
	}
}
