package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/p2p/ckpt"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
)

// fetch downloads the model the mesh named (θ₀ and outer momentum of
// f.Step) from its donors, verifies it against f.Hash, and makes it this
// node's model. On failure the mesh is not told Synced: it picks donors again
// after its sync timeout.
func (n *Node) fetch(ctx context.Context, f *mesh.Fetch, adopt bool) error {
	what := "fetching the live model"
	if adopt {
		what = "adopting the larger side's model"
	}
	n.log.Info(what, "step", f.Step, "hash", short(f.Hash), "donors", len(f.From), "our_step", n.model.step, "our_hash", short(n.model.hash))
	donors := n.reachableDonors(f.From)
	start := time.Now()
	progress := n.fetchProgress()
	data, bad, err := ckpt.Fetch(ctx, n.host.Libp2p(), donors, ckpt.FetchSpec{Step: f.Step, Hash: f.Hash, Run: n.runKey()},
		ckpt.FetchConfig{MaxBytes: 16*n.params + 1<<20, Logger: n.cfg.Logger}, progress)
	for _, b := range bad {
		n.log.Warn("donor served bad checkpoint data", "peer", b)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return n.fetchFailed(ctx, f, "download", "model fetch failed; the mesh picks donors again", err)
	}
	theta0, v, state, err := n.decodeFetched(data, f)
	if err != nil {
		return n.fetchFailed(ctx, f, "unusable", "fetched model unusable", err)
	}
	hist, herr := fetchedHistory(state, f.Step)
	if herr != nil {
		// The model is verified; its history is the donor's word. Without
		// it this node admits as if the line had none, until its first ring.
		n.log.Warn("the donors' line history is unusable; newcomers are judged without it", "step", f.Step, "err", herr)
	}
	n.retry.succeeded()
	if err := n.engine.SetParams(theta0); err != nil {
		return err
	}
	n.model.set(f.Step, func() { n.model.theta0, n.model.outer.V = theta0, v })
	step, hash := n.model.step, n.model.hash
	nodePort{n}.Synced(step, hash, hist)
	n.board.update(func(s *Status) { s.OuterStep, s.ModelHash, s.InnerStep = step, hash, 0 })
	n.met.fetchSeconds.Observe(time.Since(start).Seconds())
	n.log.Info("model synced", "step", step, "hash", short(hash), "took", fmtDur(time.Since(start)), "adopted", adopt)
	return nil
}

// reachableDonors returns the donors of from (this node excluded) that it
// has a direct connection to, or all of them if none: a donor behind a NAT
// that this node reaches only through a relay, or not at all, would hold
// the download's manifest round for its whole timeout.
func (n *Node) reachableDonors(from []mesh.PeerID) []peer.ID {
	var all, direct []peer.ID
	for _, id := range from {
		p, err := peerID(id)
		if err != nil || id == n.self {
			continue
		}
		all = append(all, p)
		if info := n.host.PeerInfo(p); info.Connected && !info.Relayed {
			direct = append(direct, p)
		}
	}
	if len(direct) > 0 {
		return direct
	}
	return all
}

// fetchFailed counts and reports a failed fetch — a warning the first time
// a reason comes up, then at debug level while it repeats — waits out the
// backoff, then tells the mesh, which picks donors again: a fetch that
// cannot succeed (another run's model, a model over the size limit) does
// not become a storm of retries and log lines.
func (n *Node) fetchFailed(ctx context.Context, f *mesh.Fetch, cause, msg string, err error) error {
	n.met.fetchFailures.WithLabelValues(cause).Inc()
	if errors.Is(err, ckpt.ErrMovedOn) {
		// Not a failure to back off from: the network is a step ahead of
		// what the mesh asked for; it asks for the newest at once.
		n.log.Info("the donors moved on; fetching their newer step", "step", f.Step)
		nodePort{n}.SyncFailed()
		return nil
	}
	wait, repeat := n.retry.failed(cause + ": " + err.Error())
	level := slog.LevelWarn
	if repeat {
		level = slog.LevelDebug
	}
	n.log.Log(ctx, level, msg, "step", f.Step, "err", err, "retry_in", fmtDur(wait), "failures", n.retry.fails)
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	nodePort{n}.SyncFailed()
	return nil
}

// backoff spaces the retries of something that keeps failing: the first
// retry after base, each next one twice as late, up to limit.
type backoff struct {
	base, limit time.Duration
	fails       int
	lastWhy     string
}

// Fetch retries: half a second, doubling to a minute.
const (
	fetchRetryBase  = 500 * time.Millisecond
	fetchRetryLimit = time.Minute
)

// failed records a failure for reason why and returns how long to wait
// before retrying, and whether why is the reason of the failure before.
func (b *backoff) failed(why string) (wait time.Duration, repeat bool) {
	b.fails++
	repeat, b.lastWhy = why == b.lastWhy, why
	wait = b.base
	for i := 1; i < b.fails && wait < b.limit; i++ {
		wait *= 2
	}
	return min(wait, b.limit), repeat
}

// succeeded resets the backoff.
func (b *backoff) succeeded() { b.fails, b.lastWhy = 0, "" }

// fetchProgress returns the progress callback of a fetch: the board, the
// operator's progress bar, and a log line a second.
func (n *Node) fetchProgress() func(ckpt.Progress) {
	lastLog := time.Now()
	return func(p ckpt.Progress) {
		n.board.update(func(s *Status) {
			s.Download = &Download{Step: p.Step, BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Donors: p.Donors, Retries: p.ChunksRetried}
		})
		if n.cfg.OnProgress != nil {
			n.cfg.OnProgress(Progress{Work: "fetch", Done: p.BytesDone, Total: p.BytesTotal,
				Detail: fmt.Sprintf("step %d from %d donors", p.Step, p.Donors)})
		}
		if time.Since(lastLog) > time.Second || p.BytesDone == p.BytesTotal {
			lastLog = time.Now()
			n.log.Info("download", "step", p.Step, "done", p.BytesDone, "total", p.BytesTotal,
				"donors", p.Donors, "retried", p.ChunksRetried, "bad_donors", p.BadDonors)
		}
	}
}

// decodeFetched decodes a fetched snapshot and checks it fits this model
// and hashes to what the mesh named.
func (n *Node) decodeFetched(data []byte, f *mesh.Fetch) (theta0, v []float32, state []byte, err error) {
	theta0, v, state, err = ckpt.DecodeSnapshot(data)
	if err == nil && (int64(len(theta0)) != n.params || len(v) != len(theta0)) {
		err = fmt.Errorf("model of %d params (momentum %d), ours has %d: different model config", len(theta0), len(v), n.params)
	}
	if err == nil && train.Hash(theta0) != f.Hash {
		err = errors.New("hash mismatch after verification")
	}
	return theta0, v, state, err
}

// Checkpoint layout under <home>/checkpoints/step-NNNNNNNN:
//
//	engine/              the engine's own checkpoint (model, AdamW moments, data position)
//	outer.safetensors    theta0 (the global model of the step) and the outer momentum
//	node.json            run, outer step and θ₀ hash
const (
	checkpointDir  = "checkpoints"
	outerFile      = "outer.safetensors"
	nodeStateFile  = "node.json"
	engineSubdir   = "engine"
	nodeStateMagic = "intellect-node/node/1"
)

type nodeState struct {
	Format string `json:"format"`
	Run    string `json:"run"`
	// Manifest is the run manifest's id; empty in checkpoints written
	// before manifests existed.
	Manifest string `json:"manifest,omitempty"`
	Step     uint64 `json:"step"`
	Hash     string `json:"hash"`
	// History is who made the line's last models (mesh.History); absent
	// in checkpoints written before admission limits.
	History []mesh.Made `json:"history,omitempty"`
}

// saveCheckpoint writes a durable checkpoint of the current outer step.
func (n *Node) saveCheckpoint() error {
	start := time.Now()
	err := n.writeCheckpoint()
	if err != nil {
		n.met.ckptFailures.Inc()
		return err
	}
	n.met.ckptSeconds.Observe(time.Since(start).Seconds())
	return nil
}

// writeCheckpoint writes the checkpoint of the current step.
func (n *Node) writeCheckpoint() error {
	root := filepath.Join(n.cfg.Home, checkpointDir)
	name := fmt.Sprintf("%s%08d", train.CheckpointPrefix, n.model.step)
	return train.WriteDirAtomic(root, name, func(tmp string) error {
		defer n.dirProgress(tmp, checkpointBytes(n.params), fmt.Sprintf("step %d", n.model.step))()
		if err := n.engine.Save(filepath.Join(tmp, engineSubdir)); err != nil {
			return err
		}
		ts := []train.Tensor{
			{Name: "theta0", Shape: []int{len(n.model.theta0)}, Data: n.model.theta0},
			{Name: "outer_momentum", Shape: []int{len(n.model.outer.V)}, Data: n.model.outer.V},
		}
		if err := train.WriteSafetensors(filepath.Join(tmp, outerFile), ts, map[string]string{"hash": n.model.hash}); err != nil {
			return err
		}
		hist, _ := n.history.of(n.model.step, n.model.hash)
		b, _ := json.MarshalIndent(nodeState{Format: nodeStateMagic, Run: n.cfg.Run, Manifest: n.runID(), Step: n.model.step, Hash: n.model.hash, History: hist}, "", "  ")
		return os.WriteFile(filepath.Join(tmp, nodeStateFile), b, 0o600)
	}, n.cfg.KeepCheckpoints)
}

// resume loads the newest checkpoint under <home>/checkpoints, if any.
func (n *Node) resume(opts train.Options) (bool, error) {
	dir, err := train.LatestCheckpoint(filepath.Join(n.cfg.Home, checkpointDir))
	if err != nil || dir == "" {
		return false, err
	}
	bad := func(err error) (bool, error) {
		return false, fmt.Errorf("node: checkpoint %s: %w (move it away to start fresh)", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, nodeStateFile))
	if err != nil {
		return bad(err)
	}
	var st nodeState
	if err := json.Unmarshal(b, &st); err != nil || st.Format != nodeStateMagic {
		return bad(fmt.Errorf("%s: not a node state (%v)", nodeStateFile, err))
	}
	if st.Run != n.cfg.Run || (st.Manifest != "" && st.Manifest != n.runID()) {
		return bad(fmt.Errorf("it belongs to run %q manifest %s, not %q manifest %s", st.Run, short(st.Manifest), n.cfg.Run, short(n.runID())))
	}
	ts, _, err := train.ReadSafetensors(filepath.Join(dir, outerFile))
	if err != nil {
		return bad(err)
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
		return bad(errors.New("outer state missing or does not match its hash"))
	}
	if err := mesh.ValidateHistory(st.Step, st.History); err != nil {
		return bad(fmt.Errorf("%s: %w", nodeStateFile, err))
	}
	eng, err := n.resumeEngine(filepath.Join(dir, engineSubdir), opts)
	if err != nil {
		return bad(err)
	}
	if len(eng.Params()) != len(theta0) {
		eng.Close()
		return bad(fmt.Errorf("model has %d params, checkpoint %d", len(eng.Params()), len(theta0)))
	}
	if err := eng.SetParams(theta0); err != nil {
		eng.Close()
		return bad(err)
	}
	n.engine, n.model.theta0, n.model.step = eng, theta0, st.Step
	n.resumedHist = st.History
	n.model.outer = &train.Outer{LR: n.cfg.OuterLR, Momentum: *n.cfg.OuterMomentum, V: v}
	n.log.Info("resumed from checkpoint", "dir", dir, "outer_step", st.Step)
	return true, nil
}

// resumeEngine restores the CPU trainer with its AdamW state; other devices
// start a fresh engine (their parameters are then set from θ₀).
func (n *Node) resumeEngine(dir string, opts train.Options) (train.Engine, error) {
	if n.cfg.Device == "cpu" {
		t, err := train.ResumeTrainer(dir, n.data)
		if err != nil {
			return nil, err
		}
		if t.Options().Model != opts.Model {
			return nil, fmt.Errorf("checkpoint model %+v differs from --preset/--config %+v", t.Options().Model, opts.Model)
		}
		return t, nil
	}
	return n.newEngine(opts)
}

// checkpointBytes estimates a checkpoint's size for its progress: the
// engine's parameters and two AdamW moments, θ₀ and the outer momentum,
// 4 bytes each.
func checkpointBytes(params int64) int64 { return 5 * 4 * params }

// dirProgress reports, while a checkpoint is written into dir, the bytes
// written so far against total to Config.OnProgress (nothing without one),
// by looking at the files every 200 ms. The returned func stops it and
// reports completion.
func (n *Node) dirProgress(dir string, total int64, detail string) func() {
	report := n.cfg.OnProgress
	if report == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				report(Progress{Work: "checkpoint", Done: min(dirBytes(dir), total-1), Total: total, Detail: detail})
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		report(Progress{Work: "checkpoint", Done: total, Total: total, Detail: detail})
	}
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) int64 {
	var sum int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				sum += info.Size()
			}
		}
		return nil
	})
	return sum
}
