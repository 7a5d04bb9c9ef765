package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/node/diloco"
)

// signFlipper is an attacking member: it follows every protocol but sends
// scale (< 0) × its pseudo-gradient.
type signFlipper struct {
	inner diloco.Reducer
	scale float32
}

func (s signFlipper) Attempt(ctx context.Context, r *mesh.Ring, b collective.Buffers) (diloco.Stats, error) {
	for i := range b.Src {
		b.Src[i] *= s.scale
	}
	return s.inner.Attempt(ctx, r, b)
}

func (s signFlipper) Failed(r *mesh.Ring, err error) mesh.PeerID { return s.inner.Failed(r, err) }

// TestRobustNetworkExcludesAttacker: 4 in-process nodes average robustly;
// one sends −1000× its update. The honest three keep identical models that
// stay near a clean run's, flag it, and exclude it after excludeAfter steps.
func TestRobustNetworkExcludesAttacker(t *testing.T) {
	if testing.Short() {
		t.Skip("4 nodes, 6 outer steps")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const k, steps = 4, 6
	nodes := robustNodes(ctx, t, k, k, steps, "attack-test") // honest owners pass every audit: no one else is excluded
	bad := nodes[k-1]
	bad.tamper = func(r diloco.Reducer) diloco.Reducer { return signFlipper{r, -1000} }
	runHonest(ctx, t, nodes)
	honest := nodes[:k-1]
	checkHonest(t, honest, bad, steps, "attacker", "flagged at steps [1 2 3]")
	hist := honest[0].board.historyList()
	first, last := hist[0].EvalLoss, hist[len(hist)-1].EvalLoss
	if !(last < first) {
		t.Fatalf("honest held-out loss went from %.4f to %.4f under attack", first, last)
	}
}

// TestRobustNetworkExcludesOpposer: one of 4 sends −4× its update, which
// the owners clip only mildly (4× the median norm is below the hard flag's
// 8×), so only the direction gives it away: its contributions pull against
// the others, and the honest three exclude it after opposeAfter steps with
// that evidence and end with one model.
func TestRobustNetworkExcludesOpposer(t *testing.T) {
	const k, steps = 4, 5
	ctx, nodes := attackNodes(t, k, k, steps, "opposer-test")
	bad := nodes[k-1]
	bad.tamper = func(r diloco.Reducer) diloco.Reducer { return signFlipper{r, -4} }
	runHonest(ctx, t, nodes)
	honest := nodes[:k-1]
	checkHonest(t, honest, bad, steps, "opposer", "median) at steps [1 2 3]")
	for _, n := range honest {
		if got := testutil.ToFloat64(n.met.robustFlags.WithLabelValues("opposed")); got != opposeAfter {
			t.Fatalf("%s counted %v opposed steps, want %d", n.self, got, opposeAfter)
		}
		c := n.board.snapshot().Contribution
		if c == nil || len(c.Owners) == 0 {
			t.Fatalf("%s: no contribution report", n.self)
		}
		for _, o := range c.Owners {
			if !(o.Cosine > 0.1) {
				t.Fatalf("%s: owner %s saw its update at cosine %v", n.self, o.Owner, o.Cosine)
			}
		}
	}
	// What the owners told the opposer of its own update, while they did.
	c := bad.board.snapshot().Contribution
	if c == nil || len(c.Owners) == 0 {
		t.Fatal("the opposer got no contribution report")
	}
	for _, o := range c.Owners {
		if !(o.Cosine < opposeCos) {
			t.Fatalf("the opposer's step %d: owner %s reported cosine %v", c.Step, o.Owner, o.Cosine)
		}
	}
}

// forgingOwner is an attacking segment owner: it sends every member the
// same forged result (its table's first entry moved), so the members
// agree with each other and only an audit shows the lie.
type forgingOwner struct {
	collective.MeshTransport
	shards int
}

func (f forgingOwner) Send(ctx context.Context, to, lane int, msg []byte) error {
	if lane >= f.shards {
		msg = append([]byte(nil), msg...)
		for i := range 4 {
			msg[12+i] ^= 0x40 // the table's first float (after the 12-byte header)
		}
	}
	return f.MeshTransport.Send(ctx, to, lane, msg)
}

// TestAuditExcludesForgingOwner: 4 in-process nodes average robustly and
// audit after every step; one owner forges its results. The honest three
// catch it in an audit, exclude it with the evidence, and end with one
// model.
func TestAuditExcludesForgingOwner(t *testing.T) {
	const k, steps = 4, 5
	ctx, nodes := attackNodes(t, k, k, steps, "audit-test")
	bad := nodes[k-1]
	sc := bad.cfg.scatterConfig()
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	shards := sc.Shards
	bad.scatterWrap = func(tr collective.MeshTransport) collective.MeshTransport { return forgingOwner{tr, shards} }
	runHonest(ctx, t, nodes)
	honest := nodes[:k-1]
	checkHonest(t, honest, bad, steps, "forger", "audit")
}

// attackNodes is robustNodes for an attack test of 2 minutes at most,
// skipped with -short.
func attackNodes(t *testing.T, k, minMembers int, steps uint64, run string) (context.Context, []*Node) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%d nodes, %d outer steps", k, steps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, robustNodes(ctx, t, k, minMembers, steps, run)
}

// robustNodes makes k in-process nodes of one run with robust averaging,
// auditing every owner every step, the first the others' bootstrap; the
// run's minimum is minMembers.
func robustNodes(ctx context.Context, t *testing.T, k, minMembers int, steps uint64, run string) []*Node {
	nodes := make([]*Node, k)
	for i := range nodes {
		var boot []string
		if i > 0 {
			boot = nodes[0].host.Addrs()
		}
		c := twoNodeConfig(t, steps, false, boot)
		c.MinMembers, c.Averaging, c.Run = minMembers, AveragingRobust, run
		n, err := New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.host.Close() })
		n.auditAlways = true
		nodes[i] = n
	}
	return nodes
}

// runHonest runs every node and waits for all but the last, the attacker:
// excluded, it may never reach the last step, so it is stopped once the
// honest ones are done.
func runHonest(ctx context.Context, t *testing.T, nodes []*Node) {
	bad := nodes[len(nodes)-1]
	badCtx, stopBad := context.WithCancel(ctx)
	badDone := make(chan struct{})
	go func() { bad.Run(badCtx); close(badDone) }()
	defer func() { stopBad(); <-badDone }()
	errs := make(chan error, len(nodes)-1)
	for _, n := range nodes[:len(nodes)-1] {
		go func() { errs <- n.Run(ctx) }()
	}
	for range len(nodes) - 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// checkHonest: the honest nodes end at step steps with one model, each
// having excluded bad (what names it in the failure) and nobody else.
func checkHonest(t *testing.T, honest []*Node, bad *Node, steps uint64, what, evidence string) {
	t.Helper()
	for _, n := range honest {
		if n.model.Hash() != honest[0].model.Hash() || n.model.Step() != steps {
			t.Fatalf("honest members end at step %d/%d with different models", n.model.Step(), honest[0].model.Step())
		}
		ex := n.host.Excluded()
		if len(ex) != 1 || ex[0].ID != bad.host.ID() {
			t.Fatalf("%s excluded %+v, want the %s %s", n.self, ex, what, bad.host.ID())
		}
		if !strings.Contains(ex[0].Evidence, evidence) {
			t.Fatalf("%s excluded the %s for %q, want %q in the evidence", n.self, what, ex[0].Evidence, evidence)
		}
		t.Logf("%s: %s", n.self, ex[0].Evidence)
	}
}

// TestFalseReportExcludesOwner: one owner publishes verdict reports that
// state twice the norm of every other member's contribution. Each honest
// member checks its own entry against what it sent, excludes the owner with
// the signed report as evidence, and the honest three end with one model;
// their /v1/status shows what the honest owners reported of their
// contributions.
func TestFalseReportExcludesOwner(t *testing.T) {
	const k, steps = 4, 4
	ctx, nodes := attackNodes(t, k, k, steps, "report-test")
	bad := nodes[k-1]
	bad.reportTamper = func(r *ownerReport) {
		for _, s := range r.Segments {
			for i := range s.Members {
				s.Members[i].NormSq *= 2
			}
		}
	}
	runHonest(ctx, t, nodes)
	honest := nodes[:k-1]
	checkHonest(t, honest, bad, steps, "false reporter", "verdict report")
	for _, n := range honest {
		c := n.board.snapshot().Contribution
		if c == nil || c.Step != steps || len(c.Owners) != len(honest)-1 {
			t.Fatalf("%s: contribution report %+v, want step %d from the %d other honest owners", n.self, c, steps, len(honest)-1)
		}
		for _, o := range c.Owners {
			if o.Owner == string(bad.self) || o.Segments == 0 || !(o.Norm > 0) || o.MinClip <= 0 || o.MinClip > 1 || o.Rejected != 0 {
				t.Fatalf("%s: owner report %+v", n.self, o)
			}
		}
		if got := testutil.ToFloat64(n.met.reports.WithLabelValues("false")); got != 1 {
			t.Fatalf("%s counted %g false reports, want 1", n.self, got)
		}
	}
}

// TestFalseAccuserKeepsNobodyOut: one member names every other member in
// the X of each of its votes (and leaves them out of its proposed ring).
// Under the old union of the votes' X it trained each step alone and the
// honest members fetched its model; now its accusations are disputed, it
// sits out every step, and the honest three train on together with one
// model, every step in one ring of the three. The run's minimum is the
// three: a member that accuses everyone else is in no ring with them, so a
// minimum of all four would hold the first step until a fifth came.
func TestFalseAccuserKeepsNobodyOut(t *testing.T) {
	const k, steps = 4, 4
	ctx, nodes := attackNodes(t, k, k-1, steps, "accuser-test")
	bad := nodes[k-1]
	var others []mesh.PeerID
	for _, n := range nodes[:k-1] {
		others = append(others, n.self)
	}
	slices.Sort(others)
	bad.meshTamper = func(m *mesh.Message) {
		if m.Type != mesh.MsgPropose {
			return
		}
		m.Excluded = slices.Clone(others)
		m.Members = slices.DeleteFunc(m.Members, func(mb mesh.Member) bool { return slices.Contains(others, mb.ID) })
		m.Links = nil
	}
	runHonest(ctx, t, nodes)
	honest := nodes[:k-1]
	for _, n := range honest {
		if n.model.Hash() != honest[0].model.Hash() || n.model.Step() != steps {
			t.Fatalf("honest members end at step %d/%d with different models", n.model.Step(), honest[0].model.Step())
		}
		st := n.board.snapshot()
		if len(st.Members) != len(honest) || slices.Contains(st.Members, string(bad.self)) {
			t.Fatalf("%s: last ring %v, want the %d honest members", n.self, st.Members, len(honest))
		}
	}
}
