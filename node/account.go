package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/account"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p/scatter"
)

// The node drives robust averaging's accountability (mesh/account): after
// each attempt of the direct scatter (scatterReducer) and for each verdict
// report that arrives (the mesh goroutine), it hands the event to its
// account.Member and carries out the actions: publish the report, exclude
// members with the evidence, run the audits, count and log.

// ContributionReport is, for /v1/status, what the owners of the last step
// reported of this node's contribution.
type ContributionReport = account.Contribution

// OwnerReport is one owner's word on this node's contribution.
type OwnerReport = account.OwnerReport

// accountant serialises the calls into the node's account.Member, which is
// not safe for concurrent use: the training goroutine observes attempts,
// the mesh goroutine hands it reports, Run waits for the last ones.
type accountant struct {
	mu sync.Mutex
	m  *account.Member
}

func (a *accountant) do(f func(m *account.Member)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a.m)
}

// settle carries out the accountability of this node's attempt over rg
// with cfg (defaults filled in) and its result; audits run in ctx.
func (n *Node) settle(ctx context.Context, rg *mesh.Ring, cfg collective.ScatterConfig, res collective.ScatterResult) {
	var acts account.Actions
	var err error
	n.acct.do(func(m *account.Member) { acts, err = m.Observe(rg, cfg, res) })
	if err != nil {
		n.log.Debug("verdict report not published", "step", rg.Step+1, "err", err)
	}
	n.carryOutAccount(ctx, rg.Step+1, acts)
}

// onReport checks an owner's verdict report (a peer's bytes, signed by
// from) against what this node sent.
func (n *Node) onReport(from mesh.PeerID, data []byte) {
	var acts account.Actions
	var err error
	n.acct.do(func(m *account.Member) { acts, err = m.Receive(from, data) })
	if err != nil {
		n.log.Warn("bad verdict report", "from", from, "err", err)
		return
	}
	n.carryOutAccount(n.life, 0, acts)
}

// carryOutAccount does what the accountability asks after step (0: a
// report arrived).
func (n *Node) carryOutAccount(ctx context.Context, step uint64, acts account.Actions) {
	n.noteFlags(step, acts.Flagged)
	if acts.Publish != nil {
		n.publishReport(step, acts.Publish)
	}
	reports := len(acts.Confirmed)
	for _, e := range acts.Exclude {
		if e.Reason == account.ReasonFalseReport {
			n.met.reports.WithLabelValues("false").Inc()
			reports++
		}
		n.exclude(e.Member, e.Reason.String(), e.Evidence)
	}
	for _, c := range acts.Confirmed {
		n.met.reports.WithLabelValues("consistent").Inc()
		if c.Cosine < account.OpposeCos {
			n.log.Warn("a segment owner saw this node's update point against the other members'; owners exclude a member that does so in 3 of 8 steps: check this node's data and configuration against the run's",
				"step", c.Step, "owner", c.Owner, "cosine", c.Cosine)
		}
	}
	if reports > 0 {
		var c *ContributionReport
		n.acct.do(func(m *account.Member) { c = m.Contribution() })
		n.board.update(func(s *Status) { s.Contribution = c })
	}
	for _, a := range acts.Audit {
		n.audit(ctx, a)
	}
}

// noteFlags counts, in the metrics, the contributions this node's segments
// clipped hard, rejected or found opposing the others at step, and logs
// each member so flagged.
func (n *Node) noteFlags(step uint64, flags []account.Flag) {
	for _, f := range flags {
		s := f.Sums
		n.met.robustFlags.WithLabelValues("clipped").Add(float64(s.Hard))
		n.met.robustFlags.WithLabelValues("rejected").Add(float64(s.Rejected))
		if s.Opposed() {
			n.met.robustFlags.WithLabelValues("opposed").Inc()
		}
		n.log.Warn("robust averaging flagged a contribution", "step", step, "member", f.Member,
			"chunks_clipped_hard", s.Hard, "chunks_rejected", s.Rejected, "cosine", s.Cos())
	}
}

// publishReport publishes this owner's verdict report of step, in the
// background (the next phase does not wait for gossip), in the node's life
// rather than the attempt's: a node that reached its last step ends the
// step's context at once, and a publication still queued was dropped.
func (n *Node) publishReport(step uint64, b []byte) {
	n.wg.Go(func() {
		pctx, cancel := context.WithTimeout(n.life, 5*time.Second)
		defer cancel()
		if err := n.pub.PublishTo(pctx, account.Topic, b); err != nil && n.life.Err() == nil {
			n.log.Debug("publish verdict report", "step", step, "err", err)
		}
	})
}

// audit runs, in the background, one audit: it asks the owner for the
// chunk's inputs and excludes it if its answer proves a lie.
func (n *Node) audit(ctx context.Context, a account.Audit) {
	n.wg.Go(func() {
		err := n.askAudit(ctx, a)
		switch {
		case err == nil:
			n.met.audits.WithLabelValues("passed").Inc()
			n.log.Debug("audit passed", "step", a.Ring.Step+1, "owner", a.Owner, "shard", a.Shard, "segment", a.Segment, "chunk", a.Chunk)
		case errors.Is(err, account.ErrForged):
			n.met.audits.WithLabelValues("failed").Inc()
			e := a.Exclusion(err)
			n.exclude(e.Member, e.Reason.String(), e.Evidence)
		case ctx.Err() != nil:
		default:
			n.met.audits.WithLabelValues("unanswered").Inc()
			n.log.Info("audit not answered", "step", a.Ring.Step+1, "owner", a.Owner, "err", err)
		}
	})
}

// askAudit asks the owner of audit a for the chunk's inputs and checks
// them: nil, an account.ErrForged, or why the owner could not be asked.
func (n *Node) askAudit(ctx context.Context, a account.Audit) error {
	pid, err := peerID(a.Owner)
	if err != nil {
		return err
	}
	inputs, err := n.sc.Audit(ctx, pid, a.Ring.ID, a.Shard, a.Segment, a.Chunk, len(a.Ring.Members))
	switch {
	case errors.Is(err, scatter.ErrProtocol):
		return account.Malformed(err)
	case err != nil:
		return err
	}
	return a.Check(inputs)
}

// reportWait bounds how long a node that reached its last outer step waits
// for the owners' verdict reports of that step, so that a lie in the last
// report is caught and /v1/status shows the whole last step.
const reportWait = 3 * time.Second

// reportLinger is how long such a node stays at least, so that its own
// report of the last step reaches the members still waiting for it: a
// published gossip message is only queued, and a node that closed its host
// at once dropped it.
const reportLinger = time.Second

// awaitReports waits, at most reportWait, until every owner of this node's
// last attempt has reported on it (an excluded or departed owner never
// does), and at least reportLinger.
func (n *Node) awaitReports(ctx context.Context) {
	var attempted bool
	n.acct.do(func(m *account.Member) { attempted = m.Attempted() })
	if !attempted {
		return // no attempt of the direct scatter: no reports to wait for or to send
	}
	outstanding := func() (k int) {
		n.acct.do(func(m *account.Member) { k = m.Outstanding() })
		return k
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(reportWait)
	linger := time.Now().Add(reportLinger)
	for outstanding() > 0 || time.Now().Before(linger) {
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			n.log.Debug("verdict reports of the last step missing", "owners", outstanding())
			return
		case <-tick.C:
		}
	}
}
