package node

import (
	"context"
	"fmt"
	"time"

	"github.com/intellect-node/intellect-node/train"
)

// trainLoop runs the outer loop until ctx ends or MaxOuterSteps is reached.
func (n *Node) trainLoop(ctx context.Context) error {
	cfg := loopConfig{inner: n.cfg.InnerSteps, maxOuter: n.cfg.MaxOuterSteps, tick: n.cfg.Tick, drain: drainTimeout}
	if n.cfg.Overlap {
		cfg.lag = n.cfg.OverlapSteps
		if cfg.lag == 0 {
			cfg.lag = -1 // the first inner step at which the average is in
		}
	}
	var red reducer = ringReducer{n}
	if n.cfg.Averaging == AveragingRobust {
		red = scatterReducer{n}
	}
	if n.tamper != nil {
		red = n.tamper(red)
	}
	l := newOuterLoop(cfg, n.engine, &n.model, red, nodePort{n}, nodeHooks{n}, n.cfg.ErrorFeedback, n.log)
	return l.run(ctx)
}

// nodeHooks publish the outer loop's progress: board, metrics, history,
// log, checkpoints; and carry out model fetches.
type nodeHooks struct{ n *Node }

func (h nodeHooks) innerDone(inner int, st train.StepStats) {
	bySource := tokensBySource(h.n.data)
	h.n.board.update(func(s *Status) {
		s.InnerStep, s.Loss = inner, st.Loss
		s.TokensPerSec = float64(st.Tokens) / st.Compute.Seconds()
		s.TokensBySource = bySource
	})
}

func (h nodeHooks) fetch(ctx context.Context, ev meshEvent) error {
	return h.n.fetch(ctx, ev.fetch, ev.adopt)
}

// committed records that the global model of step t+1 is this node's:
// record, log, checkpoint.
func (h nodeHooks) committed(t uint64, ot outerTimes, out outcome, eval float64) {
	n := h.n
	n.finishOuter(ot, out, eval)
	if n.cfg.CheckpointEvery > 0 && n.model.step%uint64(n.cfg.CheckpointEvery) == 0 {
		if err := n.saveCheckpoint(); err != nil {
			n.log.Error("checkpoint", "err", err)
		}
	}
}

// finishOuter records, logs and publishes a completed outer step.
func (n *Node) finishOuter(ot outerTimes, out outcome, eval float64) {
	wall := time.Since(ot.start)
	rec := OuterRecord{
		Step: n.model.step, Time: time.Now(), Members: len(out.ring.Members), EvalLoss: eval,
		AllReduceSec: out.took.Seconds(), ComputeSec: ot.compute.Seconds(), WallSec: wall.Seconds(),
		Utilization: ot.compute.Seconds() / wall.Seconds(), BytesSent: out.stats.BytesSent,
		BytesReceived: out.stats.BytesRecv, ModelHash: n.model.hash, Attempts: ot.attempts,
	}
	if ot.losses > 0 {
		rec.Loss = ot.loss / float64(ot.losses)
	}
	n.board.record(rec)
	n.met.outerDone(wall, out.took, ot.attempts)
	members := make([]string, len(out.ring.Members))
	for i, id := range out.ring.Members {
		members[i] = string(id)
	}
	n.board.update(func(s *Status) {
		s.OuterStep, s.InnerStep, s.Members, s.EvalLoss, s.ModelHash = n.model.step, 0, members, eval, n.model.hash
		s.ComputeUtilization, s.LastAllReduceSec = rec.Utilization, rec.AllReduceSec
	})
	n.appendHistory(rec)
	n.log.Info("outer step", "step", n.model.step, "members", rec.Members, "loss", fmt.Sprintf("%.4f", rec.Loss),
		"eval_loss", fmt.Sprintf("%.4f", eval), "allreduce", fmtDur(out.took), "sent", rec.BytesSent,
		"received", rec.BytesReceived, "utilization", fmt.Sprintf("%.3f", rec.Utilization),
		"attempts", ot.attempts, "hash", short(n.model.hash))
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
