package account

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// testH is the run's H of the tests: every member claims it.
const testH = 4

// testNet is k members of a run with robust averaging, each with its
// Member, reducing in memory.
type testNet struct {
	t       *testing.T
	ids     []mesh.PeerID
	members []*Member
	cfg     collective.ScatterConfig
	rng     *rand.Rand
}

func newTestNet(t *testing.T, k int, auditAll bool) *testNet {
	cfg := collective.ScatterConfig{Shards: 2, ChunkElems: 256, Audit: true, Robust: collective.RobustConfig{MaxWeight: testH}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := &testNet{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(1, 2))}
	for i := range k {
		id := mesh.PeerID(fmt.Sprintf("m%d", i))
		n.ids = append(n.ids, id)
		n.members = append(n.members, New(Config{Self: id, AuditAll: auditAll, Rand: rand.New(rand.NewPCG(uint64(i), 7))}))
	}
	return n
}

// ring is the ring of every member at outer step index step.
func (n *testNet) ring(step uint64) *mesh.Ring {
	w := make([]float32, len(n.ids))
	for i := range w {
		w[i] = testH
	}
	return &mesh.Ring{ID: fmt.Sprintf("ring-%d", step), Step: step, Members: n.ids, Weights: w}
}

// srcs returns honest pseudo-gradients: a shared direction plus noise.
func (n *testNet) srcs(dim int) [][]float32 {
	dir := make([]float32, dim)
	for j := range dir {
		dir[j] = float32(n.rng.NormFloat64())
	}
	out := make([][]float32, len(n.ids))
	for i := range out {
		out[i] = make([]float32, dim)
		for j := range out[i] {
			out[i][j] = dir[j] + 0.5*float32(n.rng.NormFloat64())
		}
	}
	return out
}

// scatter runs one attempt of the direct scatter over rg in memory.
func (n *testNet) scatter(rg *mesh.Ring, srcs [][]float32) []collective.ScatterResult {
	k := len(rg.Members)
	ts := collective.NewMemMesh(k, 2*n.cfg.Shards)
	res := make([]collective.ScatterResult, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			dst := make([]float32, len(srcs[i]))
			res[i], errs[i] = collective.ScatterAllReduce(context.Background(), ts[i], i, rg.Weights, collective.Buffers{Src: srcs[i], Dst: dst}, n.cfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			n.t.Fatalf("member %d: %v", i, err)
		}
	}
	return res
}

// step is one outer step: the attempt, every member's Observe (the first
// late, after the others' reports reached it), the reports delivered to
// every other member (tamper may change member i's), and the audits
// answered with the owners' inputs (show may change them). It returns
// every member's actions.
func (n *testNet) step(step uint64, srcs [][]float32, tamper func(i int, b []byte) []byte,
	show func(owner int, inputs [][]byte) [][]byte) []Actions {
	rg := n.ring(step)
	res := n.scatter(rg, srcs)
	acts := make([]Actions, len(n.members))
	for i := len(n.members) - 1; i >= 0; i-- {
		var err error
		if acts[i], err = n.members[i].Observe(rg, n.cfg, res[i]); err != nil {
			n.t.Fatal(err)
		}
		pub := acts[i].Publish
		if tamper != nil {
			pub = tamper(i, pub)
		}
		for j, m := range n.members {
			if j == i {
				continue
			}
			got, err := m.Receive(n.ids[i], pub)
			if err != nil {
				n.t.Fatal(err)
			}
			acts[j].Exclude = append(acts[j].Exclude, got.Exclude...)
			acts[j].Confirmed = append(acts[j].Confirmed, got.Confirmed...)
		}
	}
	for i := range acts {
		n.audit(i, &acts[i], res, show)
	}
	return acts
}

// audit answers member i's audits with the owners' inputs and adds the
// exclusions they prove.
func (n *testNet) audit(i int, acts *Actions, res []collective.ScatterResult, show func(owner int, inputs [][]byte) [][]byte) {
	for _, a := range acts.Audit {
		owner := a.Ring.Rank(a.Owner)
		inputs := res[owner].Owned[a.Shard].ChunkInputs(a.Chunk)
		if show != nil {
			inputs = show(owner, inputs)
		}
		if err := a.Check(inputs); errors.Is(err, ErrForged) {
			acts.Exclude = append(acts.Exclude, a.Exclusion(err))
		} else if err != nil {
			n.t.Fatalf("member %d's audit of %s: %v", i, a.Owner, err)
		}
	}
}

// TestMembersHonest: with honest members and owners, nobody is flagged or
// excluded, every member confirms every other owner's report (one arrived
// before it noted its attempt), and every audit passes.
func TestMembersHonest(t *testing.T) {
	n := newTestNet(t, 4, true)
	for step := range uint64(3) {
		acts := n.step(step, n.srcs(3000), nil, nil)
		for i, a := range acts {
			if len(a.Exclude) > 0 || len(a.Flagged) > 0 || a.Publish == nil {
				t.Fatalf("step %d, member %d: excluded %+v, flagged %+v, report %d bytes", step, i, a.Exclude, a.Flagged, len(a.Publish))
			}
			if len(a.Confirmed) != 3 || len(a.Audit) != 3 {
				t.Fatalf("step %d, member %d: %d reports confirmed, %d audits; want 3 each", step, i, len(a.Confirmed), len(a.Audit))
			}
			m := n.members[i]
			if c := m.Contribution(); c == nil || c.Step != step+1 || len(c.Owners) != 3 || m.Outstanding() != 0 || !m.Attempted() {
				t.Fatalf("step %d, member %d: contribution %+v, %d outstanding", step, i, c, m.Outstanding())
			}
			for _, o := range m.Contribution().Owners {
				if !(o.Cosine > 0.5) || o.Rejected != 0 || o.MinClip <= 0 {
					t.Fatalf("step %d, member %d: owner %s's report %+v", step, i, o.Owner, o)
				}
			}
		}
	}
}

// excluders returns, per excluded member, the members that excluded it and
// why.
func excluders(acts []Actions) map[mesh.PeerID]map[int]Reason {
	out := map[mesh.PeerID]map[int]Reason{}
	for i, a := range acts {
		for _, e := range a.Exclude {
			if out[e.Member] == nil {
				out[e.Member] = map[int]Reason{}
			}
			out[e.Member][i] = e.Reason
		}
	}
	return out
}

// TestMembersExcludeAttacker: a member that sends −1000× its update is
// flagged by every honest owner at every step and excluded by all at the
// third, for that reason.
func TestMembersExcludeAttacker(t *testing.T) {
	n := newTestNet(t, 4, false)
	for step := range uint64(3) {
		srcs := n.srcs(3000)
		for j := range srcs[3] {
			srcs[3][j] *= -1000
		}
		acts := n.step(step, srcs, nil, nil)
		ex := excluders(acts)
		for i := range 3 {
			if len(acts[i].Flagged) != 1 || acts[i].Flagged[0].Member != "m3" || acts[i].Flagged[0].Sums.Hard == 0 {
				t.Fatalf("step %d, member %d flagged %+v", step, i, acts[i].Flagged)
			}
		}
		switch {
		case step < ExcludeAfter-1 && len(ex) != 0:
			t.Fatalf("step %d: excluded %v", step, ex)
		case step == ExcludeAfter-1 && (len(ex) != 1 || len(ex["m3"]) != 3 || ex["m3"][0] != ReasonFlagged):
			t.Fatalf("step %d: excluded %v, want m3 by the three others for its flags", step, ex)
		}
	}
}

// TestMembersExcludeLyingOwner: an owner whose report doubles every norm
// is excluded by every other member for a false report.
func TestMembersExcludeLyingOwner(t *testing.T) {
	n := newTestNet(t, 4, false)
	tamper := func(i int, b []byte) []byte {
		if i != 2 {
			return b
		}
		r, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r.Segments {
			for j := range s.Members {
				s.Members[j].NormSq *= 2
			}
		}
		out, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ex := excluders(n.step(0, n.srcs(3000), tamper, nil))
	if len(ex) != 1 || len(ex["m2"]) != 3 || ex["m2"][0] != ReasonFalseReport {
		t.Fatalf("excluded %v, want m2 by the three others for a false report", ex)
	}
}

// TestMembersExcludeForgingOwner: an owner that shows auditors a changed
// input of another member, or a changed input of the auditor's own, fails
// every audit of it.
func TestMembersExcludeForgingOwner(t *testing.T) {
	for name, show := range map[string]func(owner int, inputs [][]byte) [][]byte{
		"another's input": func(owner int, inputs [][]byte) [][]byte {
			if owner == 1 {
				other := (owner + 1) % len(inputs)
				inputs[other] = append([]byte(nil), inputs[other]...)
				inputs[other][len(inputs[other])-1] ^= 0x55
			}
			return inputs
		},
		"fewer inputs": func(owner int, inputs [][]byte) [][]byte {
			if owner == 1 {
				return inputs[:2]
			}
			return inputs
		},
	} {
		t.Run(name, func(t *testing.T) {
			n := newTestNet(t, 4, true)
			ex := excluders(n.step(0, n.srcs(3000), nil, show))
			if len(ex) != 1 || len(ex["m1"]) != 3 || ex["m1"][0] != ReasonAudit {
				t.Fatalf("excluded %v, want m1 by the three others for its audit", ex)
			}
		})
	}
}

// TestObserveNotMember: a ring without this member is an error.
func TestObserveNotMember(t *testing.T) {
	m := New(Config{Self: "x"})
	if _, err := m.Observe(&mesh.Ring{Members: []mesh.PeerID{"a"}}, collective.ScatterConfig{}, collective.ScatterResult{}); !errors.Is(err, ErrNotMember) {
		t.Fatalf("Observe of another ring: %v", err)
	}
	if _, err := m.Receive("a", []byte{1, 2}); !errors.Is(err, ErrBadReport) {
		t.Fatalf("Receive of garbage: %v", err)
	}
}
