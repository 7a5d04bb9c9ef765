package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/train"
)

// outerTimes accumulates the timing of one outer step.
type outerTimes struct {
	start    time.Time
	compute  time.Duration
	loss     float64
	losses   int
	attempts int
}

// trainLoop runs outer steps until ctx ends or MaxOuterSteps is reached.
func (n *Node) trainLoop(ctx context.Context) error {
	if n.cfg.Overlap {
		return n.overlapLoop(ctx)
	}
	for {
		if n.reachedMax(ctx) {
			return errLeft
		}
		if err := n.outerStep(ctx); err != nil {
			return err
		}
	}
}

// drainTimeout bounds how long a node that reached --max-outer-steps waits
// for the other members of its last ring before it leaves.
const drainTimeout = 10 * time.Second

// reachedMax reports whether --max-outer-steps is reached. If so, it first
// drains: it waits until every other member of the last ring is seen at this
// node's step or gone (or drainTimeout passes). A member whose all-reduce
// returned has written all its bytes, but they may still be on their way to
// a slower neighbour; leaving at once would cut them off.
func (n *Node) reachedMax(ctx context.Context) bool {
	if n.cfg.MaxOuterSteps == 0 || n.step < n.cfg.MaxOuterSteps {
		return false
	}
	n.log.Info("reached --max-outer-steps", "outer_step", n.step)
	tick := time.NewTicker(n.cfg.Tick)
	defer tick.Stop()
	deadline := time.After(drainTimeout)
	for {
		res := make(chan bool, 1)
		n.mesh(func(m *mesh.Mesh) { res <- ringCaughtUp(m.Status()) })
		select {
		case ok := <-res:
			if ok {
				return true
			}
		case <-ctx.Done():
			return true
		}
		select {
		case <-tick.C:
		case <-deadline:
			n.log.Warn("leaving before every member of the last ring was seen at this step")
			return true
		case <-ctx.Done():
			return true
		}
	}
}

// ringCaughtUp reports whether every other member of the last decided ring
// is known to be at st.Step or beyond, or gone.
func ringCaughtUp(st mesh.Status) bool {
	if st.Ring == nil {
		return true
	}
	for _, id := range st.Ring.Members {
		if id == st.ID {
			continue
		}
		i := slices.IndexFunc(st.Peers, func(p mesh.PeerStatus) bool { return p.ID == id })
		if i < 0 {
			continue // forgotten: long gone
		}
		if p := st.Peers[i]; !p.Dead && p.State != mesh.StateLeft && p.Step < st.Step {
			return false
		}
	}
	return true
}

// outerStep trains the inner steps of the current outer step, agrees on a
// ring, averages the pseudo-gradients and applies the outer optimizer. A
// fetch asked by the mesh (this node fell behind, or its side of a partition
// lost) replaces all of that by the fetched model.
func (n *Node) outerStep(ctx context.Context) error {
	ot := outerTimes{start: time.Now()}
	t := n.step
	if ev, ok := n.pollEvent(); ok && ev.fetch != nil {
		return n.fetch(ctx, ev.fetch, ev.adopt)
	}
	inner, err := n.innerSteps(ctx, &ot)
	if err != nil {
		return err
	}
	params := n.engine.Params()
	for i := range n.delta {
		n.delta[i] = n.theta0[i] - params[i]
	}
	n.mesh(func(m *mesh.Mesh) { m.SetReady(t, inner) })
	arStart := time.Now()
	res, fetch, err := n.reduce(ctx, t, n.delta, &ot.attempts)
	if err != nil {
		return err
	}
	if fetch != nil {
		return n.fetch(ctx, fetch.fetch, fetch.adopt)
	}
	arTime := time.Since(arStart)
	n.setModel(t+1, func() {
		n.outer.Apply(params, n.theta0, n.work)
		copy(n.theta0, params)
	})
	if err := n.engine.SetParams(params); err != nil {
		return err
	}
	evalStart := time.Now()
	eval, err := n.engine.Eval()
	if err != nil {
		return fmt.Errorf("node: eval: %w", err)
	}
	ot.compute += time.Since(evalStart)
	n.commitOuter(t, ot, res, arTime, eval)
	return nil
}

// setModel runs update, which changes θ₀ and v, and makes the result the
// global model of outer step `step` (with its hash), as one change under
// modelMu, so a donor encoding a snapshot sees either all of it or none.
func (n *Node) setModel(step uint64, update func()) {
	n.modelMu.Lock()
	defer n.modelMu.Unlock()
	update()
	n.step = step
	n.hash = train.Hash(n.theta0)
}

// commitOuter records that n.theta0, already updated by setModel, is the
// global model of outer step t+1: mesh, record, log, checkpoint.
func (n *Node) commitOuter(t uint64, ot outerTimes, res reduceResult, arTime time.Duration, eval float64) {
	hash := n.hash
	n.mesh(func(m *mesh.Mesh) { m.Completed(t, hash) })
	n.finishOuter(ot, res, arTime, eval)
	if n.cfg.CheckpointEvery > 0 && n.step%uint64(n.cfg.CheckpointEvery) == 0 {
		if err := n.saveCheckpoint(); err != nil {
			n.log.Error("checkpoint", "err", err)
		}
	}
}

// innerSteps runs the H inner steps of one phase, accumulating timing and
// losses into ot, and returns how many it ran.
func (n *Node) innerSteps(ctx context.Context, ot *outerTimes) (int, error) {
	for inner := 1; inner <= n.cfg.InnerSteps; inner++ {
		if err := n.innerStep(ctx, ot, inner); err != nil {
			return inner - 1, err
		}
	}
	return n.cfg.InnerSteps, nil
}

// innerStep runs inner step number inner (1-based) of the phase.
func (n *Node) innerStep(ctx context.Context, ot *outerTimes, inner int) error {
	st, err := n.engine.Step()
	if err != nil {
		return fmt.Errorf("node: inner step: %w", err)
	}
	ot.compute += st.Compute
	ot.loss += st.Loss
	ot.losses++
	bySource := tokensBySource(n.data)
	n.board.update(func(s *Status) {
		s.InnerStep, s.Loss = inner, st.Loss
		s.TokensPerSec = float64(st.Tokens) / st.Compute.Seconds()
		s.TokensBySource = bySource
	})
	return ctx.Err()
}

// mesh runs f on the mesh goroutine without waiting for it.
func (n *Node) mesh(f func(*mesh.Mesh)) {
	n.meshCmds <- meshCmd{f: f}
}

// pollEvent returns a pending mesh event, if any.
func (n *Node) pollEvent() (meshEvent, bool) {
	select {
	case ev := <-n.events:
		return ev, true
	default:
		return meshEvent{}, false
	}
}

// finishOuter records, logs and publishes a completed outer step.
func (n *Node) finishOuter(ot outerTimes, res reduceResult, arTime time.Duration, eval float64) {
	wall := time.Since(ot.start)
	rec := OuterRecord{
		Step: n.step, Time: time.Now(), Members: len(res.ring.Members), EvalLoss: eval,
		AllReduceSec: arTime.Seconds(), ComputeSec: ot.compute.Seconds(), WallSec: wall.Seconds(),
		Utilization: ot.compute.Seconds() / wall.Seconds(), BytesSent: res.stats.BytesSent,
		BytesReceived: res.stats.BytesRecv, ModelHash: n.hash, Attempts: ot.attempts,
	}
	if ot.losses > 0 {
		rec.Loss = ot.loss / float64(ot.losses)
	}
	n.board.record(rec)
	n.met.outerDone(wall, arTime, ot.attempts)
	members := make([]string, len(res.ring.Members))
	for i, id := range res.ring.Members {
		members[i] = string(id)
	}
	n.board.update(func(s *Status) {
		s.OuterStep, s.InnerStep, s.Members, s.EvalLoss, s.ModelHash = n.step, 0, members, eval, n.hash
		s.ComputeUtilization, s.LastAllReduceSec = rec.Utilization, rec.AllReduceSec
	})
	n.appendHistory(rec)
	n.log.Info("outer step", "step", n.step, "members", rec.Members, "loss", fmt.Sprintf("%.4f", rec.Loss),
		"eval_loss", fmt.Sprintf("%.4f", eval), "allreduce", fmtDur(arTime), "sent", rec.BytesSent,
		"received", rec.BytesReceived, "utilization", fmt.Sprintf("%.3f", rec.Utilization),
		"attempts", ot.attempts, "hash", short(n.hash))
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
