package node

import (
	"context"
	"fmt"
	"time"

	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/train"
)

// trainLoop runs the DiLoCo loop (node/diloco) until ctx ends or
// MaxOuterSteps is reached (diloco.ErrDone): over the network's reducer
// (the ring, or the direct scatter with --averaging robust) and this node's
// mesh goroutine (nodePort).
func (n *Node) trainLoop(ctx context.Context) error {
	cfg := diloco.Config{Inner: n.cfg.InnerSteps, MaxOuter: n.cfg.MaxOuterSteps, Tick: n.cfg.Tick,
		Drain: diloco.DefaultDrain, ErrorFeedback: n.cfg.ErrorFeedback, Eval: true, Logger: n.log,
		WorkerMomentum: *n.cfg.WorkerMomentum}
	if n.cfg.Overlap {
		cfg.Lag = n.cfg.OverlapSteps
		if cfg.Lag == 0 {
			cfg.Lag = -1 // the first inner step at which the average is in
		}
	}
	l, err := diloco.New(cfg, n.engine, n.model, n.reducer, nodePort{n}, nodeHooks{n})
	if err != nil {
		return err
	}
	if n.resumedRes != nil && cfg.ErrorFeedback {
		if err := l.SetResidual(n.resumedRes); err != nil {
			return err
		}
	}
	if n.resumedMom != nil && l.WorkerMomentum() != nil {
		if err := l.SetWorkerMomentum(n.resumedMom); err != nil {
			return err
		}
	}
	n.loop, n.resumedRes, n.resumedMom = l, nil, nil
	return l.Run(ctx)
}

// nodeHooks publish the loop's progress: board, metrics, history, log,
// checkpoints.
type nodeHooks struct{ n *Node }

func (h nodeHooks) InnerDone(inner int, st train.StepStats) {
	bySource := tokensBySource(h.n.data)
	h.n.board.update(func(s *Status) {
		s.InnerStep, s.Loss = inner, st.Loss
		s.TokensPerSec = float64(st.Tokens) / st.Compute.Seconds()
		s.TokensBySource = bySource
	})
}

// Synced shows a fetched model on the board.
func (h nodeHooks) Synced(step uint64, hash string) {
	h.n.board.update(func(s *Status) { s.OuterStep, s.ModelHash, s.InnerStep = step, hash, 0 })
	h.n.notePastInitial(step, hash)
}

// Committed records that the global model of c.Step is this node's:
// record, log, checkpoint.
func (h nodeHooks) Committed(c diloco.Commit) {
	n := h.n
	n.keepUpdate(c)
	n.finishOuter(c)
	n.notePastInitial(c.Step, c.Hash)
	if n.cfg.CheckpointEvery > 0 && c.Step%uint64(n.cfg.CheckpointEvery) == 0 {
		if err := n.saveCheckpoint(); err != nil {
			n.log.Error("checkpoint", "err", err)
		}
	}
}

// finishOuter records, logs and publishes a completed outer step.
func (n *Node) finishOuter(c diloco.Commit) {
	wall := time.Since(c.Start)
	rec := OuterRecord{
		Step: c.Step, Time: time.Now(), Members: len(c.Ring.Members), EvalLoss: c.Eval, Loss: c.Loss,
		AllReduceSec: c.Took.Seconds(), ComputeSec: c.Compute.Seconds(), WallSec: wall.Seconds(),
		Utilization: c.Compute.Seconds() / wall.Seconds(), BytesSent: c.Stats.BytesSent,
		BytesReceived: c.Stats.BytesRecv, ModelHash: c.Hash, Attempts: c.Attempts,
	}
	if n.cfg.Averaging == AveragingRobust {
		rec.Owners = segmentOwners(c.Ring)
	}
	n.board.record(rec)
	n.met.outerDone(wall, c.Took, c.Attempts)
	members := make([]string, len(c.Ring.Members))
	for i, id := range c.Ring.Members {
		members[i] = string(id)
	}
	n.board.update(func(s *Status) {
		s.OuterStep, s.InnerStep, s.Members, s.EvalLoss, s.ModelHash = c.Step, 0, members, c.Eval, c.Hash
		s.ComputeUtilization, s.LastAllReduceSec = rec.Utilization, rec.AllReduceSec
	})
	n.keepHistory(rec)
	n.log.Info("outer step", "step", c.Step, "members", rec.Members, "loss", fmt.Sprintf("%.4f", rec.Loss),
		"eval_loss", fmt.Sprintf("%.4f", c.Eval), "allreduce", fmtDur(c.Took), "sent", rec.BytesSent,
		"received", rec.BytesReceived, "utilization", fmt.Sprintf("%.3f", rec.Utilization),
		"attempts", c.Attempts, "hash", short(c.Hash))
}

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// tokensBySource returns the training tokens drawn from each source of data
// (nil for the embedded corpus, which has one).
func tokensBySource(data train.Source) map[string]int64 {
	if c, ok := data.(interface{ TokensBySource() map[string]int64 }); ok {
		return c.TokensBySource()
	}
	return nil
}
