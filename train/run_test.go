package train

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// runLosses runs Run and returns the training loss of every progress line
// by step, and the eval losses seen.
func runLosses(t *testing.T, rc RunConfig) (map[int]float64, []float64) {
	t.Helper()
	var out bytes.Buffer
	rc.Out, rc.JSON, rc.LogEvery = &out, true, 1
	if err := Run(context.Background(), rc, DefaultSource()); err != nil {
		t.Fatal(err)
	}
	losses := map[int]float64{}
	var evals []float64
	for _, line := range strings.Split(out.String(), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		var p Progress
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("bad JSON line %q: %v", line, err)
		}
		if p.Loss != nil {
			losses[p.Step] = *p.Loss
		}
		if p.EvalLoss != nil {
			evals = append(evals, *p.EvalLoss)
		}
	}
	return losses, evals
}

// TestRunResumeBitIdentical is the CLI's kill-and-resume path: a run stopped
// at step 6 and resumed with --resume prints the same losses, bit for bit, as
// an uninterrupted run to step 12.
func TestRunResumeBitIdentical(t *testing.T) {
	o := testOptions(t)
	o.GradAccum = 1
	full, evals := runLosses(t, RunConfig{Options: o, Steps: 12, EvalEvery: 4})
	if len(full) != 12 || len(evals) != 4 { // step 0, 4, 8, 12
		t.Fatalf("%d loss lines, %d evals", len(full), len(evals))
	}
	home := t.TempDir()
	first, _ := runLosses(t, RunConfig{Options: o, Steps: 6, Home: home, SaveEvery: 3})
	second, _ := runLosses(t, RunConfig{Options: o, Steps: 12, Home: home, Resume: true})
	for s := 1; s <= 12; s++ {
		got, ok := first[s]
		if s > 6 {
			got, ok = second[s]
		}
		if !ok || math.Float64bits(got) != math.Float64bits(full[s]) {
			t.Fatalf("step %d: resumed run %v, uninterrupted %v", s, got, full[s])
		}
	}
	if _, ok := second[6]; ok {
		t.Fatal("resumed run repeated step 6")
	}
}
