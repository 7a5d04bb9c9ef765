package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMetrics(t *testing.T) {
	text := strings.Join([]string{
		"# HELP go_goroutines Number of goroutines.",
		"# TYPE go_goroutines gauge",
		"go_goroutines 123",
		"process_open_fds 17",
		"go_goroutines_extra 9",
		`intellect_p2p_bytes_total{direction="sent",protocol="/intellect/ckpt/1.0.0"} 7.613494e+06`,
		`intellect_p2p_bytes_total{direction="received",protocol="/intellect/ckpt/1.0.0"} 5`,
		"process_resident_memory_bytes not-a-number",
	}, "\n")
	got, err := parseMetrics(strings.NewReader(text), []string{"go_goroutines", "process_open_fds", ckptSentMetric, "process_resident_memory_bytes"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"go_goroutines": 123, "process_open_fds": 17, ckptSentMetric: 7613494}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestParseRunPhases(t *testing.T) {
	t.Setenv("SOAK_MINUTES", "3")
	t.Setenv("SOAK_SEED", "42")
	c, err := parseRun([]string{"-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if c.Seed != 42 || c.baseline != 45*time.Second || c.quiet != 90*time.Second || c.faults != 45*time.Second {
		t.Fatalf("seed %d, phases %v / %v / %v", c.Seed, c.baseline, c.faults, c.quiet)
	}
	t.Setenv("SOAK_MINUTES", "60")
	if c, err = parseRun([]string{"-dir", t.TempDir()}); err != nil || c.baseline != 5*time.Minute || c.faults != 53*time.Minute+30*time.Second {
		t.Fatalf("60 min: %v / %v, %v", c.baseline, c.faults, err)
	}
	used := t.TempDir()
	if err := os.Mkdir(filepath.Join(used, "homes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := parseRun([]string{"-dir", used}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a used work dir: %v, want refused", err)
	}
	for _, args := range [][]string{{"-minutes", "1"}, {"-max-members", "20"}, {"-members", "13"}} {
		if _, err := parseRun(append(args, "-dir", t.TempDir())); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
