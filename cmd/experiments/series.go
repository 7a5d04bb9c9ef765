package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/intellect-node/intellect-node/node"
)

// Limits on the progress output read back from `train --json` (history
// files are read by node.DecodeHistory, with the node's limits).
const (
	maxLineBytes = 1 << 16 // one progress line
	maxRecords   = 1 << 20 // lines per file
)

// ErrBadHistory is wrapped by every error decoding a history or progress file.
var ErrBadHistory = errors.New("experiments: bad history")

// progress is one line of `intellect-node train --json` (train.Progress).
type progress struct {
	Step     int      `json:"step"`
	EvalLoss *float64 `json:"eval_loss"`
}

// decodeLines decodes r's JSON lines into fn, one call per non-empty line.
func decodeLines(r io.Reader, fn func(line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLineBytes)
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // the train command also prints plain lines (# checkpoint ...)
		}
		if n++; n > maxRecords {
			return fmt.Errorf("%w: more than %d lines", ErrBadHistory, maxRecords)
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrBadHistory, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadHistory, err)
	}
	return nil
}

// decodeHistory decodes a node's history.jsonl with node.DecodeHistory and
// checks every record as a configuration's series needs it; the initial
// model's record (step 0, no ring: a held-out loss and nothing else) is
// skipped.
func decodeHistory(r io.Reader) ([]node.OuterRecord, error) {
	recs, err := node.DecodeHistory(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHistory, err)
	}
	out := recs[:0]
	for _, rec := range recs {
		if rec.Step == 0 && rec.Members == 0 {
			continue
		}
		if err := checkRecord(rec); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadHistory, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// checkRecord rejects a record that cannot be an outer step of a ring.
func checkRecord(r node.OuterRecord) error {
	switch {
	case r.Step == 0 || r.Step > math.MaxInt32:
		return fmt.Errorf("step %d", r.Step)
	case r.Members < 1 || r.Members > 1<<16:
		return fmt.Errorf("step %d: members %d", r.Step, r.Members)
	case !finite(r.EvalLoss) || !finite(r.Loss):
		return fmt.Errorf("step %d: loss %v / eval loss %v", r.Step, r.Loss, r.EvalLoss)
	}
	return nil
}

// decodeProgress decodes `train --json` output into (step, eval loss) points
// for the lines that carry an eval loss.
func decodeProgress(r io.Reader) ([]progress, error) {
	var out []progress
	err := decodeLines(r, func(line []byte) error {
		var p progress
		if err := json.Unmarshal(line, &p); err != nil {
			return err
		}
		if p.EvalLoss == nil {
			return nil
		}
		if p.Step < 0 || !finite(*p.EvalLoss) {
			return fmt.Errorf("step %d eval loss %v", p.Step, *p.EvalLoss)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// point is one evaluation of a configuration's global model.
type point struct {
	Step     int     // outer step (DiLoCo) or optimizer step / H (single node)
	Tokens   int64   // training tokens folded into the evaluated model
	EvalLoss float64 // mean over the nodes (they hold identical models)
	Spread   float64 // max − min eval loss over the nodes (0 when bit-identical)
	Full     bool    // this and every earlier outer step had a ring of all the nodes
}

// result is one configuration's outcome.
type result struct {
	cfg      config
	points   []point
	nodes    int
	sentPer  float64 // mean bytes sent per node per outer step (all-reduce)
	recvPer  float64 // mean bytes received per node per outer step
	hashesOK bool    // every node ended every step with the same model hash
	minRing  int     // smallest ring of any outer step (nodes when none broke up)
	arSec    float64 // mean all-reduce seconds per outer step
}

// collect reads the histories of every configuration.
func collect(s *setup, cfgs []config) ([]result, error) {
	var out []result
	for _, c := range cfgs {
		var r result
		var err error
		if c.Single {
			r, err = collectSingle(s, c)
		} else {
			r, err = collectCluster(s, c)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func readFile[T any](path string, decode func(io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func collectSingle(s *setup, c config) (result, error) {
	ps, err := readFile(filepath.Join(s.configDir(c), "node0.log"), decodeProgress)
	if err != nil {
		return result{}, err
	}
	r := result{cfg: c, nodes: 1, hashesOK: true, minRing: 1}
	for _, p := range ps {
		if p.Step == 0 || p.Step%s.inner != 0 {
			continue
		}
		r.points = append(r.points, point{Step: p.Step / s.inner, EvalLoss: *p.EvalLoss, Full: true,
			Tokens: int64(p.Step) * int64(s.tokensPerStep*s.nodes)})
	}
	if len(r.points) == 0 {
		return r, fmt.Errorf("%w: no evaluations", ErrBadHistory)
	}
	return r, nil
}

func collectCluster(s *setup, c config) (result, error) {
	var hists [][]node.OuterRecord
	for i := range s.nodes {
		h, err := readFile(filepath.Join(s.configDir(c), fmt.Sprintf("node%d", i), "history.jsonl"), decodeHistory)
		if err != nil {
			return result{}, err
		}
		hists = append(hists, h)
	}
	return mergeHistories(c, hists, s.inner, s.tokensPerStep)
}

// mergeHistories turns the nodes' histories into one series: per outer step
// the mean eval loss, and the tokens folded into the model so far (members ×
// H × tokens per inner step, summed over steps). Byte counts are averaged
// over the nodes and steps whose ring held every node.
func mergeHistories(c config, hists [][]node.OuterRecord, inner, tokensPerStep int) (result, error) {
	r := result{cfg: c, nodes: len(hists), hashesOK: true, minRing: len(hists)}
	bySteps := map[uint64][]node.OuterRecord{}
	var sent, recv, ar float64
	var n, full int
	for _, h := range hists {
		for _, rec := range h {
			r.minRing = min(r.minRing, rec.Members)
			bySteps[rec.Step] = append(bySteps[rec.Step], rec)
			n++
			if rec.Members != len(hists) {
				continue // bytes of a smaller ring are not the configuration's
			}
			sent += float64(rec.BytesSent)
			recv += float64(rec.BytesReceived)
			ar += rec.AllReduceSec
			full++
		}
	}
	if n == 0 {
		return r, fmt.Errorf("%w: empty histories", ErrBadHistory)
	}
	if full > 0 {
		r.sentPer, r.recvPer, r.arSec = sent/float64(full), recv/float64(full), ar/float64(full)
	}
	steps := make([]uint64, 0, len(bySteps))
	for st := range bySteps {
		steps = append(steps, st)
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
	var tokens int64
	allIn := true
	for i, st := range steps {
		p, members, ok := stepPoint(bySteps[st])
		r.hashesOK = r.hashesOK && ok && len(bySteps[st]) == len(hists)
		allIn = allIn && st == uint64(i+1) && len(bySteps[st]) == len(hists)
		for _, rec := range bySteps[st] {
			allIn = allIn && rec.Members == len(hists)
		}
		tokens += int64(members) * int64(inner) * int64(tokensPerStep)
		p.Step, p.Tokens, p.Full = int(st), tokens, allIn
		r.points = append(r.points, p)
	}
	return r, nil
}

// stepPoint summarises the nodes' records of one outer step: the mean and
// spread of their eval losses, the ring size, and whether they agree on the
// model hash.
func stepPoint(recs []node.OuterRecord) (point, int, bool) {
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	members, ok := 0, true
	for _, rec := range recs {
		lo, hi, sum = min(lo, rec.EvalLoss), max(hi, rec.EvalLoss), sum+rec.EvalLoss
		members = max(members, rec.Members)
		ok = ok && rec.ModelHash == recs[0].ModelHash
	}
	return point{EvalLoss: sum / float64(len(recs)), Spread: hi - lo}, members, ok
}
