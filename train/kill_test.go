package train

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const childEnv = "INTELLECT_TRAIN_KILL_CHILD_HOME"

// TestKillResumeChild is the process TestKillAndResume kills: it only runs
// when the parent sets childEnv, printing JSON progress to stdout.
func TestKillResumeChild(t *testing.T) {
	home := os.Getenv(childEnv)
	if home == "" {
		t.Skip("helper process of TestKillAndResume")
	}
	o := testOptions(t)
	o.GradAccum = 1
	rc := RunConfig{Options: o, Steps: 1000, Home: home, SaveEvery: 4, LogEvery: 1, JSON: true, Out: os.Stdout}
	if err := Run(context.Background(), rc, DefaultSource()); err != nil {
		t.Fatal(err)
	}
}

// TestKillAndResume kills a training process with SIGKILL once it has
// written a checkpoint, resumes from disk, and checks that every loss of the
// killed and the resumed process equals the uninterrupted run's, bit for bit.
func TestKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a subprocess")
	}
	o := testOptions(t)
	o.GradAccum = 1
	full, _ := runLosses(t, RunConfig{Options: o, Steps: 16})

	home := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillResumeChild$")
	cmd.Env = append(os.Environ(), childEnv+"="+home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := map[int]float64{}
	lastSaved := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() { // read until the second checkpoint line, SIGKILL, drain the rest
		var p Progress
		if json.Unmarshal([]byte(sc.Text()), &p) != nil || p.Loss == nil {
			continue
		}
		killed[p.Step] = *p.Loss
		if p.Checkpoint != "" {
			lastSaved = p.Step
			if p.Step >= 8 && cmd.ProcessState == nil {
				cmd.Process.Kill()
			}
		}
	}
	cmd.Wait()
	if lastSaved < 8 || lastSaved >= 16 {
		t.Fatalf("child's last checkpoint at step %d", lastSaved)
	}
	resumed, _ := runLosses(t, RunConfig{Options: o, Steps: 16, Home: home, Resume: true})
	// The resume point is the newest complete checkpoint: normally lastSaved,
	// later if the kill landed between a save and its progress line.
	start := 16 - len(resumed)
	if start < lastSaved || start%4 != 0 {
		t.Fatalf("resumed run printed steps after %d; last checkpoint seen at %d", start, lastSaved)
	}
	for s := 1; s <= 16; s++ {
		got, ok := killed[s]
		if s > start {
			got, ok = resumed[s]
		} else if !ok && s > lastSaved {
			continue // printed by no one: killed before its line
		}
		if !ok || math.Float64bits(got) != math.Float64bits(full[s]) {
			t.Fatalf("step %d: killed/resumed %v, uninterrupted %v", s, got, full[s])
		}
	}
	if !strings.HasPrefix(cmd.ProcessState.String(), "signal: killed") {
		t.Logf("child state: %s", cmd.ProcessState)
	}
}
