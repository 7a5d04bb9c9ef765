package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/intellect-node/intellect-node/internal/soak"
	"github.com/intellect-node/intellect-node/train"
)

// newestCheckpoint checks the newest checkpoint under home as a restart
// reads it (node.json's step and hash, θ₀ and the outer momentum of
// outer.safetensors, θ₀ against the hash; the sim device keeps no engine
// state): its step, or false when home holds none yet, or the error that
// makes it unusable.
func newestCheckpoint(home string) (uint64, bool, error) {
	dir := newestCheckpointDir(home)
	if dir == "" {
		return 0, false, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if err != nil {
		return 0, true, err
	}
	var st struct {
		Step uint64 `json:"step"`
		Hash string `json:"hash"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, true, fmt.Errorf("%s: node.json: %w", dir, err)
	}
	ts, _, err := train.ReadSafetensors(filepath.Join(dir, "outer.safetensors"))
	if err != nil {
		return 0, true, err
	}
	var theta0, v []float32
	for _, t := range ts {
		switch t.Name {
		case "theta0":
			theta0 = t.Data
		case "outer_momentum":
			v = t.Data
		}
	}
	if theta0 == nil || len(v) != len(theta0) || train.Hash(theta0) != st.Hash {
		return 0, true, fmt.Errorf("%s: θ₀ or its momentum missing, or θ₀ does not match node.json's hash", dir)
	}
	return st.Step, true, nil
}

// newestCheckpointDir is the newest step directory under home, "" if none.
func newestCheckpointDir(home string) string {
	dir, err := train.LatestCheckpoint(filepath.Join(home, "checkpoints"))
	if err != nil {
		return ""
	}
	return dir
}

// scanLogs reads every member's log and keeps the lines the run fails on,
// leaving out the errors that an injected fault explains.
func (r *runner) scanLogs() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Findings = map[string][]soak.Finding{}
	files, err := filepath.Glob(filepath.Join(r.c.Dir, "logs", "*.log"))
	if err != nil {
		r.fail("logs: %v", err)
		return
	}
	for _, f := range files {
		member := strings.TrimSuffix(filepath.Base(f), ".log")
		if err := r.scanLog(f, member); err != nil {
			r.fail("log %s: %v", f, err)
		}
	}
}

func (r *runner) scanLog(path, member string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	found, err := soak.ScanLog(f)
	for _, fd := range found {
		if e, ok := soak.Explained(fd, member, r.exp); ok {
			r.rep.Explained[e.Why]++
			continue
		}
		r.rep.Findings[member] = append(r.rep.Findings[member], fd)
	}
	return err
}

// report returns the run's report, with the heal times of its partitions.
func (r *runner) report() *soak.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.rep.Partitions {
		p := &r.rep.Partitions[i]
		p.HealTime, p.Healed1 = soak.HealTime(r.rep.Samples, p.Side, p.Healed)
	}
	if err := writeSamples(filepath.Join(r.c.Dir, "samples.tsv"), r.rep.Samples); err != nil {
		r.rep.Notes = append(r.rep.Notes, err.Error())
	}
	if err := writeUsage(filepath.Join(r.c.Dir, "usage.tsv"), r.rep.Usage); err != nil {
		r.rep.Notes = append(r.rep.Notes, err.Error())
	}
	return r.rep
}

// writeUsage keeps the long-lived members' resource readings as evidence:
// seconds, member, metric, value.
func writeUsage(path string, usage map[string]map[string][]soak.Point) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for _, m := range slices.Sorted(maps.Keys(usage)) {
		for _, k := range slices.Sorted(maps.Keys(usage[m])) {
			for _, p := range usage[m][k] {
				fmt.Fprintf(f, "%.1f\t%s\t%s\t%g\n", p.T.Seconds(), m, k, p.V)
			}
		}
	}
	return f.Close()
}

// writeSamples keeps the samples as evidence: seconds, member, step, hash.
func writeSamples(path string, samples []soak.Sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for _, s := range samples {
		fmt.Fprintf(f, "%.1f\t%s\t%d\t%s\n", s.T.Seconds(), s.Member, s.Step, s.Hash)
	}
	return errors.Join(err, f.Close())
}
