package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Loss against wall-clock time (docs/traffic.md, "On home links"): an
// in-process run's held-out loss curve, placed in time by the compute
// utilization its setting reached on an emulated network (wanbench nodes).
// Inner step i of a run ends at i × step ÷ utilization, step being the
// reference accelerator's inner step.
//
//	experiments clock -svg F.svg -step 1s -curve 'LABEL=RESULTS|corpus|seed|name@UTILIZATION' ...

// clockCurve is one run placed in time.
type clockCurve struct {
	label, file, key string
	util             float64 // compute ÷ wall time, in (0, 1]
}

// clockCurves is the repeated -curve flag.
type clockCurves []clockCurve

func (c *clockCurves) String() string { return fmt.Sprint(len(*c), " curves") }

// Set parses LABEL=RESULTS|corpus|seed|name@UTILIZATION; the label may
// hold "=" (the last one before the first "|" ends it).
func (c *clockCurves) Set(s string) error {
	head, run, ok := strings.Cut(s, "|") // LABEL=RESULTS | corpus|seed|name@UTILIZATION
	eq, at := strings.LastIndex(head, "="), strings.LastIndex(run, "@")
	if !ok || eq < 1 || at < 0 || strings.Count(run[:at], "|") != 2 {
		return fmt.Errorf("curve %q: want LABEL=RESULTS|corpus|seed|name@UTILIZATION", s)
	}
	u, err := strconv.ParseFloat(run[at+1:], 64)
	if err != nil || !(u > 0 && u <= 1) {
		return fmt.Errorf("curve %q: utilization %q: want a fraction in (0, 1]", s, run[at+1:])
	}
	*c = append(*c, clockCurve{label: head[:eq], file: head[eq+1:], key: run[:at], util: u})
	return nil
}

func clockMain(args []string) error { return runClock(args, os.Stdout) }

func runClock(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("clock", flag.ContinueOnError)
	var curves clockCurves
	fs.Var(&curves, "curve", "a run placed in time: LABEL=RESULTS.jsonl|corpus|seed|name@UTILIZATION (repeat)")
	step := fs.Duration("step", time.Second, "the reference accelerator's inner step")
	svg := fs.String("svg", "", "write the plot here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(curves) == 0 || *step <= 0 {
		return errors.New("want at least one -curve and a positive -step")
	}
	p := plot{Title: "Held-out loss against wall-clock time", XLabel: "hours (inner steps × step ÷ utilization, log)",
		YLabel: "held-out loss", XMin: math.NaN(), LogX: true}
	colors := []string{"#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"}
	var finals, lows []float64
	for i, c := range curves {
		res, err := readResults(c.file)
		if err != nil {
			return err
		}
		r, ok := res[c.key]
		if !ok || len(r.Eval) == 0 {
			return fmt.Errorf("curve %s: no run %q in %s", c.label, c.key, c.file)
		}
		l := line{Label: fmt.Sprintf("%s (utilization %.1f %%)", c.label, 100*c.util), Color: colors[i%len(colors)]}
		for j, e := range r.Eval {
			l.X = append(l.X, clockHours(j+1, r.Run.H, *step, c.util))
			l.Y = append(l.Y, e)
		}
		p.Lines = append(p.Lines, l)
		finals, lows = append(finals, r.Final), append(lows, slices.Min(l.Y))
	}
	writeClockTable(stdout, p.Lines, finals, slices.Max(lows))
	if *svg == "" {
		return nil
	}
	return writeFile(*svg, p.writeSVG)
}

// clockHours is when a run's record n (after n·h inner steps) ends.
func clockHours(n, h int, step time.Duration, util float64) float64 {
	return float64(n*h) * step.Hours() / util
}

// writeClockTable says per curve its final loss (32 held-out batches), the
// hours to its end, and the first hour its curve (4 batches) reached target,
// the lowest loss every curve reaches.
func writeClockTable(w io.Writer, lines []line, finals []float64, target float64) {
	fmt.Fprintf(w, "| run | final loss | hours to the end | hours to a curve loss ≤ %.4f (every run's reach) |\n|---|---|---|---|\n", target)
	for i, l := range lines {
		reach := "—"
		for j, y := range l.Y {
			if y <= target {
				reach = fmt.Sprintf("%.2f", l.X[j])
				break
			}
		}
		fmt.Fprintf(w, "| %s | %.4f | %.2f | %s |\n", l.Label, finals[i], l.X[len(l.X)-1], reach)
	}
}
