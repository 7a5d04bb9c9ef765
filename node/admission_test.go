package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// checkTwoMembers fails unless a and b both reached step steps with the
// same model at every step they both recorded, each reduced over both of
// them and nobody else.
func checkTwoMembers(t *testing.T, a, b *Node, steps uint64) {
	t.Helper()
	hashes := map[uint64]string{}
	for _, r := range a.board.historyList() {
		hashes[r.Step] = r.ModelHash
	}
	common := 0
	for _, r := range b.board.historyList() {
		if h, ok := hashes[r.Step]; ok {
			common++
			if h != r.ModelHash {
				t.Fatalf("step %d: a has model %s, b %s", r.Step, short(h), short(r.ModelHash))
			}
		}
	}
	for _, n := range []*Node{a, b} {
		hist := n.board.historyList()
		if last := hist[len(hist)-1].Step; last < steps {
			t.Fatalf("%s stopped at step %d, want ≥ %d", n.self, last, steps)
		}
		for _, r := range hist[1:] {
			if r.Members != 2 {
				t.Fatalf("%s: step %d reduced over %d members, want 2", n.self, r.Step, r.Members)
			}
		}
	}
	if common < int(steps) {
		t.Fatalf("a and b recorded %d steps in common, want ≥ %d", common, steps)
	}
}

// TestPSKRun: a creator of a psk run writes a new key to its home and a
// commitment to it into the manifest; a joiner with the key fetches the
// manifest over the private network and trains with it; a joiner with
// another key or none cannot connect and says why; a node whose stored
// manifest commits to another key, or that holds a key for an open run,
// refuses to start.
func TestPSKRun(t *testing.T) {
	const steps = 2
	c := newCluster(t, "psk-test")
	ca := c.config(steps)
	ca.Admission = AdmissionPSK
	a := c.add(ca)
	keyFile := filepath.Join(ca.Home, PSKFile)
	key, err := readPSKFile(keyFile)
	if err != nil {
		t.Fatalf("the creator wrote no key: %v", err)
	}
	if adm := a.run.m.Admission; adm.Policy != AdmissionPSK || adm.PSKCommitment != PSKCommitment(key) ||
		strings.Contains(string(a.run.raw), string(EncodePSK(key)[len("/key/swarm/psk/1.0.0/\n/base16/\n"):][:64])) {
		t.Fatalf("manifest admission %+v: want psk and the key's commitment, not the key", adm)
	}

	otherKey := filepath.Join(t.TempDir(), "other.key")
	other, _ := NewPSK()
	if err := WritePSKFile(otherKey, other); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		keyFile string
		want    string
	}{
		"other key": {otherKey, "private network key"},
		"no key":    {"", "if the run is private"},
	} {
		cfg := c.config(steps)
		cfg.PSKFile = tc.keyFile
		if _, err := c.try(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: joined a private run or said nothing useful: %v (want %q)", name, err, tc.want)
		}
	}

	// A restart whose stored manifest commits to another key.
	cfg := c.config(steps)
	cfg.Bootstrap, cfg.PSKFile = nil, otherKey
	if err := writeManifestFile(cfg.Home, a.run.raw); err != nil {
		t.Fatal(err)
	}
	if _, err := c.try(cfg); !errors.Is(err, ErrAdmission) || !strings.Contains(err.Error(), "is not the run's") {
		t.Errorf("stored psk manifest, other key: %v", err)
	}
	// A key given for an open run.
	openCfg := c.config(steps)
	openCfg.Run, openCfg.Bootstrap = "open-test", nil
	open := c.add(openCfg)
	cfg = c.config(steps)
	cfg.Bootstrap, cfg.PSKFile = nil, otherKey
	if err := writeManifestFile(cfg.Home, open.run.raw); err != nil {
		t.Fatal(err)
	}
	if _, err := c.try(cfg); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "is for psk runs") {
		t.Errorf("key for an open run: %v", err)
	}

	cb := c.config(steps)
	cb.PSKFile = keyFile
	b := c.add(cb)
	if b.run.id != a.run.id {
		t.Fatalf("joiner runs manifest %s, creator %s", b.run.id, a.run.id)
	}
	c.runAll(a, b)
	checkTwoMembers(t, a, b, steps)
}

// allowRig is an allowlist run's cluster, its creator and the means to
// make members.
type allowRig struct {
	c     *cluster
	a     *Node
	forge crypto.PrivKey
	// atHome puts members' tickets at <home>/admission.ticket, the
	// default, instead of giving TicketFile.
	atHome bool
}

// member makes a node bootstrapped from boot whose ticket is what ticket
// writes for its peer id (nothing: no ticket file); skip lets it join with
// a ticket that fails its own check (an intruder).
func (r *allowRig) member(boot []string, skip bool, ticket func(id peer.ID) string) (*Node, error) {
	t := r.c.t
	cfg := r.c.config(0)
	cfg.Bootstrap, cfg.skipTicketCheck = boot, skip
	key, _, err := p2p.LoadOrCreateIdentity(cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	if text := ticket(id); text != "" {
		path := filepath.Join(cfg.Home, TicketFile)
		if !r.atHome {
			path = filepath.Join(cfg.Home, "ticket.txt")
			cfg.TicketFile = path
		}
		if err := os.WriteFile(path, []byte(text+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return r.c.try(cfg)
}

// issue is `intellect-node admit` on the creator's home.
func (r *allowRig) issue(id peer.ID, ttl time.Duration) string {
	tk, _, err := IssueTicket(r.a.cfg.Home, id, ttl)
	if err != nil {
		r.c.t.Fatal(err)
	}
	return tk.String()
}

// newAllowRig starts an allowlist run's rig: its creator, not running.
func newAllowRig(t *testing.T, run string, minMembers int) *allowRig {
	r := &allowRig{c: newCluster(t, run)}
	cfg := r.c.config(0)
	cfg.Admission, cfg.MinMembers = AdmissionAllowlist, minMembers
	r.a = r.c.add(cfg)
	return r
}

// intruders are the tickets of nodes that join an allowlist run without
// being admitted: none, forged, expired, another peer's (b's).
func (r *allowRig) intruders(b *Node) map[string]func(peer.ID) string {
	return map[string]func(peer.ID) string{
		"no ticket": func(peer.ID) string { return "" },
		"forged": func(id peer.ID) string {
			tk, _ := p2p.IssueTicket(r.forge, r.a.run.key, id, time.Time{})
			return tk.String()
		},
		"expired": func(id peer.ID) string {
			tk, _ := p2p.IssueTicket(r.a.host.Libp2p().Peerstore().PrivKey(r.a.host.ID()), r.a.run.key, id, time.Now().Add(-time.Second))
			return tk.String()
		},
		"another peer's": func(peer.ID) string { return r.issue(b.host.ID(), 0) },
	}
}

// TestAllowlistRun: the creator of an allowlist run names its key in the
// manifest; a member with its ticket trains with it; a node without a
// ticket, or with an expired one, refuses to start and says how to get
// one; intruders that join anyway with no ticket, a forged, an expired or
// another peer's ticket are refused by both members while they train, are
// told so, and never appear in a member's status, peers or rings.
func TestAllowlistRun(t *testing.T) {
	r := newAllowRig(t, "allow-test", 2)
	r.forge, _, _ = crypto.GenerateEd25519Key(nil)
	if got := r.a.run.m.Admission; got.Policy != AdmissionAllowlist || got.Creator != r.a.host.ID().String() {
		t.Fatalf("manifest admission %+v: want allowlist by %s", got, r.a.host.ID())
	}
	boot := r.a.host.Addrs()
	for name, tc := range map[string]struct {
		ticket func(peer.ID) string
		want   string
	}{
		"no ticket": {func(peer.ID) string { return "" }, "intellect-node admit --peer"},
		"expired":   {func(id peer.ID) string { return r.issue(id, time.Nanosecond) }, "ticket expired"},
	} {
		if _, err := r.member(boot, false, tc.ticket); !errors.Is(err, ErrAdmission) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrAdmission naming %q", name, err, tc.want)
		}
	}
	b, err := r.member(boot, false, func(id peer.ID) string { return r.issue(id, time.Hour) })
	if err != nil {
		t.Fatal(err)
	}
	members := []*Node{r.a, b}
	runCtx, stop := context.WithCancel(r.c.ctx)
	wait := r.c.start(runCtx, nil, members...)
	defer func() { stop(); wait() }()
	r.c.awaitStep(1, members...)
	bad := r.runIntruders(b, members)
	step := max(stepOf(r.a), stepOf(b))
	r.c.awaitStep(step+2, members...)
	if s := bad(); len(s) > 0 {
		t.Fatalf("intruders seen in a member's status, peers or rings: %v", s)
	}
	stop()
	wait()
	checkTwoMembers(t, r.a, b, step+2)
}

// runIntruders runs the intruders of r.intruders against the members
// until each is refused by both members and told so (by its refusal to
// start, or by a peer's refusal while it trains alone), and leaves them
// running; the returned func stops them and returns the intruders seen in
// a member's status, peers or rings meanwhile.
func (r *allowRig) runIntruders(b *Node, members []*Node) (stop func() []string) {
	t := r.c.t
	var bad []*Node
	for name, ticket := range r.intruders(b) {
		n, err := r.member([]string{b.host.Addrs()[0], r.a.host.Addrs()[0]}, true, ticket)
		if err != nil {
			t.Fatalf("intruder %s: %v", name, err)
		}
		bad = append(bad, n)
	}
	var mu sync.Mutex
	told := map[*Node]bool{} // refused before it could start: its Run said so
	ctx, cancel := context.WithCancel(r.c.ctx)
	wait := r.c.start(ctx, func(n *Node, err error) {
		switch {
		case errors.Is(err, p2p.ErrNotAdmitted):
			mu.Lock()
			told[n] = true
			mu.Unlock()
		case err != nil:
			t.Errorf("intruder %s: %v", n.self, err)
		}
	}, bad...)
	seen := watchMembers(members, bad)
	for _, n := range bad {
		r.c.await("intruder "+string(n.self)+" refused by both members", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return refused(r.a, n) && refused(b, n) && (told[n] || refusedBy(n, members))
		})
	}
	return func() []string { cancel(); wait(); return seen() }
}

// refused reports whether member refused n admission to the run.
func refused(member, n *Node) bool { return member.host.PeerInfo(n.host.ID()).Refused != "" }

// refusedBy reports whether one of members refused n, as n knows.
func refusedBy(n *Node, members []*Node) bool {
	return slices.ContainsFunc(members, func(m *Node) bool { return n.host.PeerInfo(m.host.ID()).RefusedBy != "" })
}

// watchMembers samples the members' status (members), peer table and ring
// history at every change of their boards until the returned function is
// called, which returns the intruders seen in any of them.
func watchMembers(members, intruders []*Node) func() []string {
	done := make(chan struct{})
	var seen []string
	var wg sync.WaitGroup
	is := func(id string) bool {
		return slices.ContainsFunc(intruders, func(n *Node) bool { return string(n.self) == id })
	}
	wg.Go(func() {
		for {
			changed := boardChanges(members)
			for _, m := range members {
				seen = append(seen, intrudersSeen(m, is)...)
			}
			if !changed(done) {
				return
			}
		}
	})
	return func() []string {
		close(done)
		wg.Wait()
		return seen
	}
}

// intrudersSeen lists what of member's status, peers and rings names an
// intruder (is).
func intrudersSeen(m *Node, is func(string) bool) []string {
	var seen []string
	for _, id := range m.board.snapshot().Members {
		if is(id) {
			seen = append(seen, "status members: "+id)
		}
	}
	for _, p := range m.board.peerList() {
		if is(p.ID) {
			seen = append(seen, "peers: "+p.ID)
		}
	}
	for _, h := range m.board.historyList() {
		if h.Members > 2 {
			seen = append(seen, "a ring of more than the 2 members")
		}
	}
	return seen
}

// TestIssueTicketRefuses: tickets come only from the home of an allowlist
// run's creator.
func TestIssueTicketRefuses(t *testing.T) {
	key, _, _ := crypto.GenerateEd25519Key(nil)
	member, _ := peer.IDFromPrivateKey(key)
	home := func(adm Admission, withIdentity bool) string {
		h := t.TempDir()
		if adm.Policy != "" {
			m := testManifest(t)
			m.Admission = adm
			raw, _ := m.Encode()
			if err := writeManifestFile(h, raw); err != nil {
				t.Fatal(err)
			}
		}
		if withIdentity {
			if _, _, err := p2p.LoadOrCreateIdentity(h); err != nil {
				t.Fatal(err)
			}
		}
		return h
	}
	allow := Admission{Policy: AdmissionAllowlist, Creator: testCreator}
	for name, tc := range map[string]struct {
		home string
		ttl  time.Duration
		want string
	}{
		"no manifest":     {home(Admission{}, true), 0, "has no run manifest"},
		"open run":        {home(Admission{Policy: AdmissionOpen}, true), 0, `admits by policy "open"`},
		"no identity":     {home(allow, false), 0, "has no node identity"},
		"not the creator": {home(allow, true), 0, "only its creator issues tickets"},
		"negative ttl":    {home(allow, true), -time.Hour, "--expires"},
	} {
		if _, _, err := IssueTicket(tc.home, member, tc.ttl); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// TestAllowlistLateJoiner: a member that joins an allowlist run after it
// started, its ticket at the default <home>/admission.ticket, fetches the
// live model from an admitted donor (the checkpoint protocol is open to it
// once it is admitted) and then trains in its rings.
func TestAllowlistLateJoiner(t *testing.T) {
	r := newAllowRig(t, "allow-late", 1)
	r.atHome = true
	runCtx, stop := context.WithCancel(r.c.ctx)
	wait := r.c.start(runCtx, nil, r.a)
	defer func() { stop(); wait() }()
	r.c.awaitStep(3, r.a)
	b, err := r.member(r.a.host.Addrs(), false, func(id peer.ID) string { return r.issue(id, 0) })
	if err != nil {
		t.Fatal(err)
	}
	waitB := r.c.start(runCtx, nil, b)
	r.c.await("rings of both", func() bool {
		h := b.board.historyList()
		return len(h) >= 3 && h[len(h)-1].Members == 2 && h[len(h)-2].Members == 2
	})
	stop()
	waitB()
	wait()
	if fetches(t, b) == 0 {
		t.Fatal("the late joiner did not fetch the model")
	}
	ha := map[uint64]string{}
	for _, rec := range r.a.board.historyList() {
		ha[rec.Step] = rec.ModelHash
	}
	compared := 0
	for _, rec := range b.board.historyList()[1:] {
		want, ok := ha[rec.Step]
		if rec.Members != 2 || !ok {
			continue // the stop can reach the creator before it records the joiner's last step
		}
		if want != rec.ModelHash {
			t.Fatalf("step %d: joiner's model %s, creator's %s", rec.Step, short(rec.ModelHash), short(want))
		}
		compared++
	}
	if compared == 0 {
		t.Fatal("no step of two members that both recorded")
	}
}
