package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/train"
)

// Checkpoint layout under <home>/checkpoints/step-NNNNNNNN:
//
//	engine/              the engine's own checkpoint (model, AdamW moments, data position)
//	outer.safetensors    theta0 (the global model of the step), the outer momentum,
//	                     with --error-feedback ef_residual (the loop's residual), with
//	                     --worker-momentum worker_momentum (the member's v)
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
	var err error
	n.model.Read(func(step uint64, hash string, theta0, v []float32) {
		root := filepath.Join(n.cfg.Home, checkpointDir)
		name := fmt.Sprintf("%s%08d", train.CheckpointPrefix, step)
		err = train.WriteDirAtomic(root, name, func(tmp string) error {
			defer n.dirProgress(tmp, checkpointBytes(n.params), fmt.Sprintf("step %d", step))()
			if err := n.engine.Save(filepath.Join(tmp, engineSubdir)); err != nil {
				return err
			}
			ts := []train.Tensor{
				{Name: "theta0", Shape: []int{len(theta0)}, Data: theta0},
				{Name: "outer_momentum", Shape: []int{len(v)}, Data: v},
			}
			if res := n.residual(); res != nil {
				ts = append(ts, train.Tensor{Name: "ef_residual", Shape: []int{len(res)}, Data: res})
			}
			if mom := n.workerMomentum(); mom != nil {
				ts = append(ts, train.Tensor{Name: "worker_momentum", Shape: []int{len(mom)}, Data: mom})
			}
			if err := train.WriteSafetensors(filepath.Join(tmp, outerFile), ts, map[string]string{"hash": hash}); err != nil {
				return err
			}
			hist, _ := n.history.of(step, hash)
			b, _ := json.MarshalIndent(nodeState{Format: nodeStateMagic, Run: n.cfg.Run, Manifest: n.runID(), Step: step, Hash: hash, History: hist}, "", "  ")
			return os.WriteFile(filepath.Join(tmp, nodeStateFile), b, 0o600)
		}, n.cfg.KeepCheckpoints)
	})
	return err
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
	o, err := readOuter(dir, st.Hash)
	if err != nil {
		return bad(err)
	}
	if err := mesh.ValidateHistory(st.Step, st.History); err != nil {
		return bad(fmt.Errorf("%s: %w", nodeStateFile, err))
	}
	eng, err := n.resumeEngine(filepath.Join(dir, engineSubdir), opts)
	if err != nil {
		return bad(err)
	}
	if len(eng.Params()) != len(o.theta0) {
		eng.Close()
		return bad(fmt.Errorf("model has %d params, checkpoint %d", len(eng.Params()), len(o.theta0)))
	}
	if err := eng.SetParams(o.theta0); err != nil {
		eng.Close()
		return bad(err)
	}
	n.engine = eng
	n.model = diloco.NewModel(st.Step, o.theta0, &diloco.Outer{LR: n.cfg.OuterLR, Momentum: *n.cfg.OuterMomentum, V: o.v})
	n.resumedHist, n.resumedRes, n.resumedMom = st.History, o.res, o.mom
	n.log.Info("resumed from checkpoint", "dir", dir, "outer_step", st.Step)
	return true, nil
}

// outerState is what a checkpoint's outer file holds.
type outerState struct {
	theta0, v []float32 // θ₀ and the outer momentum
	res, mom  []float32 // the error-feedback residual and the worker momentum (nil if none)
}

// readOuter reads a checkpoint's outer state; θ₀ must hash to hash, and
// every other vector must be θ₀'s size.
func readOuter(dir, hash string) (outerState, error) {
	var o outerState
	ts, _, err := train.ReadSafetensors(filepath.Join(dir, outerFile))
	if err != nil {
		return o, err
	}
	for _, t := range ts {
		switch t.Name {
		case "theta0":
			o.theta0 = t.Data
		case "outer_momentum":
			o.v = t.Data
		case "ef_residual":
			o.res = t.Data
		case "worker_momentum":
			o.mom = t.Data
		}
	}
	if o.theta0 == nil || len(o.v) != len(o.theta0) || train.Hash(o.theta0) != hash {
		return outerState{}, errors.New("outer state missing or does not match its hash")
	}
	if o.res != nil && len(o.res) != len(o.theta0) {
		return outerState{}, fmt.Errorf("error-feedback residual of %d values, θ₀ of %d", len(o.res), len(o.theta0))
	}
	if o.mom != nil && len(o.mom) != len(o.theta0) {
		return outerState{}, fmt.Errorf("worker momentum of %d values, θ₀ of %d", len(o.mom), len(o.theta0))
	}
	return o, nil
}

// residual is the error-feedback residual a checkpoint keeps: the loop's,
// or the one resumed while no loop runs yet (nil without error feedback).
func (n *Node) residual() []float32 {
	if n.loop != nil {
		return n.loop.Residual()
	}
	return n.resumedRes
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
				report(Progress{Work: "checkpoint", Done: min(train.DirBytes(dir), total-1), Total: total, Detail: detail})
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		report(Progress{Work: "checkpoint", Done: total, Total: total, Detail: detail})
	}
}

// workerMomentum is the worker momentum a checkpoint keeps: the loop's, or
// the one resumed while no loop runs yet (nil without --worker-momentum).
func (n *Node) workerMomentum() []float32 {
	if n.loop != nil {
		return n.loop.WorkerMomentum()
	}
	return n.resumedMom
}
