package soak

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func planConfig(seed uint64, minutes float64) PlanConfig {
	span := time.Duration(minutes * float64(time.Minute))
	return PlanConfig{Seed: seed, Faults: Interval{From: time.Minute, To: time.Minute + span},
		Initial: 8, Min: 8, Max: 12, LongLived: 2}
}

// TestPlanEveryKindWithinBounds: for short and long fault phases, every
// kind occurs, events are sorted and inside the phase, churn comes every
// 0.5–10 s, partitions last 30–120 s and do not overlap, flaps and rate
// drops stay within their bursts, and churn keeps the modelled population
// within the bounds.
func TestPlanEveryKindWithinBounds(t *testing.T) {
	for _, minutes := range []float64{1.25, 10, 54} {
		for seed := uint64(1); seed <= 20; seed++ {
			c := planConfig(seed, minutes)
			evs, err := Plan(c)
			if err != nil {
				t.Fatal(err)
			}
			n := Count(evs)
			for _, k := range Kinds() {
				if n[k] == 0 {
					t.Fatalf("%.2f min seed %d: no %s in %v", minutes, seed, k, n)
				}
			}
			checkPlan(t, c, evs)
		}
	}
}

func checkPlan(t *testing.T, c PlanConfig, evs []Event) {
	t.Helper()
	var lastChurn, partitionEnd time.Duration = c.Faults.From, 0
	for i, e := range evs {
		if i > 0 && e.At < evs[i-1].At {
			t.Fatalf("event %d at %v before %v", i, e.At, evs[i-1].At)
		}
		if !c.Faults.Contains(e.At) || e.End() > c.Faults.To {
			t.Fatalf("%s at %v–%v outside the fault phase %v", e.Kind, e.At, e.End(), c.Faults)
		}
		switch e.Kind {
		case Kill, Join, Leave:
			if d := e.At - lastChurn; d < churnMin || d > churnMax {
				t.Fatalf("churn %v after the previous", d)
			}
			lastChurn = e.At
		case Partition:
			if e.Dur < partitionMin || e.Dur > partitionMax || e.At < partitionEnd {
				t.Fatalf("partition at %v for %v (previous ended %v)", e.At, e.Dur, partitionEnd)
			}
			partitionEnd = e.End()
		case Flap:
			for _, d := range e.Downs {
				if d.From < 0 || d.To > e.Dur || d.To-d.From < flapDownMin || d.To-d.From > flapDownMax {
					t.Fatalf("flap down %v outside its burst of %v", d, e.Dur)
				}
			}
		case RateDrop:
			if e.Factor < 0.02 || e.Factor > 0.2 {
				t.Fatalf("rate drop to %v", e.Factor)
			}
		case Skew:
			if e.Skew != ClockSkew && e.Skew != -ClockSkew {
				t.Fatalf("skew %v", e.Skew)
			}
		}
	}
}

// TestPlanReplays: a seed gives the same plan; another seed another.
func TestPlanReplays(t *testing.T) {
	a, _ := Plan(planConfig(7, 10))
	b, _ := Plan(planConfig(7, 10))
	c, _ := Plan(planConfig(8, 10))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one seed, two plans")
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("two seeds, one plan")
	}
}

func TestPlanRejects(t *testing.T) {
	for name, edit := range map[string]func(*PlanConfig){
		"fault phase shorter than a partition": func(c *PlanConfig) { c.Faults.To = c.Faults.From + 10*time.Second },
		"no long-lived member":                 func(c *PlanConfig) { c.LongLived = 0 },
		"min above initial":                    func(c *PlanConfig) { c.Min = 9 },
		"no room for the storm":                func(c *PlanConfig) { c.Max = 11 },
	} {
		c := planConfig(1, 5)
		edit(&c)
		if _, err := Plan(c); !errors.Is(err, ErrPlan) {
			t.Errorf("%s: %v, want ErrPlan", name, err)
		}
	}
}

func TestTargetAndSide(t *testing.T) {
	e := Event{Pick: 7}
	if _, ok := e.Target(nil); ok {
		t.Fatal("a target among none")
	}
	if got, _ := e.Target([]int{9, 3, 5}); got != 5 { // sorted 3 5 9; 7 mod 3 = 1
		t.Fatalf("target %d, want 5", got)
	}
	if len(e.Side([]int{4})) != 0 {
		t.Fatal("a side of a lone member")
	}
	alive := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	for pick := uint64(0); pick < 200; pick++ {
		side := Event{Pick: pick}.Side(alive)
		if len(side) < 1 || len(side) > len(alive)/2 {
			t.Fatalf("pick %d: side %v of %d", pick, side, len(alive))
		}
		if !reflect.DeepEqual(side, Event{Pick: pick}.Side(alive)) {
			t.Fatal("side not a function of the pick")
		}
	}
}
