package node

import (
	"context"
	"errors"
	"log/slog"
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

// runNodes runs nodes until ctx ends or they stop, and fails the test on
// an error.
func runNodes(t *testing.T, ctx context.Context, nodes ...*Node) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			if err := n.Run(ctx); err != nil {
				t.Errorf("%s: %v", n.self, err)
			}
		})
	}
	return &wg
}

// newNode creates a node, closing its host with the test if it never runs.
func newNode(t *testing.T, ctx context.Context, c Config) *Node {
	t.Helper()
	n, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.host.Close() })
	return n
}

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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const steps = 2
	var alog syncBuffer
	ca := twoNodeConfig(t, steps, false, nil)
	ca.Run, ca.Admission = "psk-test", AdmissionPSK
	ca.Logger = slog.New(slog.NewTextHandler(&alog, nil))
	a := newNode(t, ctx, ca)
	keyFile := filepath.Join(ca.Home, PSKFile)
	key, err := readPSKFile(keyFile)
	if err != nil {
		t.Fatalf("the creator wrote no key: %v", err)
	}
	if adm := a.run.m.Admission; adm.Policy != AdmissionPSK || adm.PSKCommitment != PSKCommitment(key) ||
		strings.Contains(string(a.run.raw), string(EncodePSK(key)[len("/key/swarm/psk/1.0.0/\n/base16/\n"):][:64])) {
		t.Fatalf("manifest admission %+v: want psk and the key's commitment, not the key", adm)
	}
	if !strings.Contains(alog.String(), "created the private run's key") {
		t.Fatalf("the creator did not say where the key is:\n%s", alog.String())
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
		c := twoNodeConfig(t, steps, false, a.host.Addrs())
		c.PSKFile = tc.keyFile
		if _, err := New(ctx, c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: joined a private run or said nothing useful: %v (want %q)", name, err, tc.want)
		}
	}

	// A restart whose stored manifest commits to another key.
	home := t.TempDir()
	if err := writeManifestFile(home, a.run.raw); err != nil {
		t.Fatal(err)
	}
	c := twoNodeConfig(t, steps, false, nil)
	c.Home, c.PSKFile = home, otherKey
	if _, err := New(ctx, c); !errors.Is(err, ErrAdmission) || !strings.Contains(err.Error(), "is not the run's") {
		t.Errorf("stored psk manifest, other key: %v", err)
	}
	// A key given for an open run.
	open := newNode(t, ctx, twoNodeConfig(t, steps, false, nil))
	c = twoNodeConfig(t, steps, false, nil)
	c.Home, c.PSKFile = t.TempDir(), otherKey
	if err := writeManifestFile(c.Home, open.run.raw); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, c); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "is for psk runs") {
		t.Errorf("key for an open run: %v", err)
	}

	cb := twoNodeConfig(t, steps, false, a.host.Addrs())
	cb.PSKFile = keyFile
	b := newNode(t, ctx, cb)
	if b.run.id != a.run.id {
		t.Fatalf("joiner runs manifest %s, creator %s", b.run.id, a.run.id)
	}
	runNodes(t, ctx, a, b).Wait()
	checkTwoMembers(t, a, b, steps)
}

// allowRig is an allowlist run's creator and the means to make members.
type allowRig struct {
	t     *testing.T
	a     *Node
	alog  *syncBuffer
	forge crypto.PrivKey
	// atHome puts members' tickets at <home>/admission.ticket, the
	// default, instead of giving TicketFile.
	atHome bool
}

// member makes a node bootstrapped from the creator whose ticket is what
// ticket writes for its peer id (nothing: no ticket file); skip lets it
// join with a ticket that fails its own check (an intruder).
func (r *allowRig) member(ctx context.Context, boot []string, skip bool, logs *syncBuffer, ticket func(id peer.ID) string) (*Node, error) {
	c := twoNodeConfig(r.t, 0, false, boot)
	c.MinMembers, c.skipTicketCheck = 2, skip
	c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	key, _, err := p2p.LoadOrCreateIdentity(c.Home)
	if err != nil {
		r.t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	if text := ticket(id); text != "" {
		path := filepath.Join(c.Home, TicketFile)
		if !r.atHome {
			path = filepath.Join(c.Home, "ticket.txt")
			c.TicketFile = path
		}
		if err := os.WriteFile(path, []byte(text+"\n"), 0o600); err != nil {
			r.t.Fatal(err)
		}
	}
	n, err := New(ctx, c)
	if err == nil {
		r.t.Cleanup(func() { n.host.Close() })
	}
	return n, err
}

// issue is `intellect-node admit` on the creator's home.
func (r *allowRig) issue(id peer.ID, ttl time.Duration) string {
	tk, _, err := IssueTicket(r.a.cfg.Home, id, ttl)
	if err != nil {
		r.t.Fatal(err)
	}
	return tk.String()
}

// TestAllowlistRun: the creator of an allowlist run names its key in the
// manifest; a member with its ticket trains with it; a node without a
// ticket, or with an expired one, refuses to start and says how to get
// one; intruders that join anyway with no ticket, a forged, an expired or
// another peer's ticket are refused by both members while they train, say
// so, and never appear in a member's status, peers or rings.
func TestAllowlistRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &allowRig{t: t, alog: &syncBuffer{}}
	r.forge, _, _ = crypto.GenerateEd25519Key(nil)
	ca := twoNodeConfig(t, 0, false, nil)
	ca.Run, ca.Admission = "allow-test", AdmissionAllowlist
	ca.Logger = slog.New(slog.NewTextHandler(r.alog, nil))
	r.a = newNode(t, ctx, ca)
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
		if _, err := r.member(ctx, boot, false, &syncBuffer{}, tc.ticket); !errors.Is(err, ErrAdmission) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrAdmission naming %q", name, err, tc.want)
		}
	}
	var blog syncBuffer
	b, err := r.member(ctx, boot, false, &blog, func(id peer.ID) string { return r.issue(id, time.Hour) })
	if err != nil {
		t.Fatal(err)
	}
	members := []*Node{r.a, b}
	runCtx, stop := context.WithCancel(ctx)
	wg := runNodes(t, runCtx, members...)
	defer func() { stop(); wg.Wait() }()
	waitStep(t, members, 1)

	intruders := map[string]func(peer.ID) string{
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
	var bad []*Node
	badLogs := map[*Node]*syncBuffer{}
	for name, ticket := range intruders {
		var logs syncBuffer
		n, err := r.member(ctx, []string{b.host.Addrs()[0], boot[0]}, true, &logs, ticket)
		if err != nil {
			t.Fatalf("intruder %s: %v", name, err)
		}
		bad, badLogs[n] = append(bad, n), &logs
	}
	// An intruder refused before its host starts fails to reach its
	// bootstrap peer, saying why; one refused later trains alone.
	intruderCtx, stopIntruders := context.WithCancel(ctx)
	var iwg sync.WaitGroup
	for _, n := range bad {
		iwg.Go(func() {
			if err := n.Run(intruderCtx); err != nil && !strings.Contains(err.Error(), "it refused this node") {
				t.Errorf("intruder %s: %v", n.self, err)
			}
		})
	}
	seen := watchMembers(members, bad)
	for _, n := range bad {
		eventuallyNode(t, "intruder "+string(n.self)+" refused by both members", func() bool {
			return refusals(r.alog, n) > 0 && refusals(&blog, n) > 0 &&
				strings.Contains(badLogs[n].String(), "refused admission by a peer")
		})
	}
	step := max(stepOf(r.a), stepOf(b))
	waitStep(t, members, step+2)
	stopIntruders()
	iwg.Wait()
	stop()
	wg.Wait()
	if s := seen(); len(s) > 0 {
		t.Fatalf("intruders seen in a member's status, peers or rings: %v", s)
	}
	checkTwoMembers(t, r.a, b, step+2)
	for _, n := range bad {
		if ca, cb := refusals(r.alog, n), refusals(&blog, n); ca != 1 || cb != 1 {
			t.Errorf("%s refused at warn %d times by the creator and %d by the member, want once each", n.self, ca, cb)
		}
	}
}

// refusals counts the warn lines of log that refuse n.
func refusals(log *syncBuffer, n *Node) int {
	c := 0
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "peer refused") && strings.Contains(l, "peer="+string(n.self)) {
			c++
		}
	}
	return c
}

// waitStep waits until every node finished outer step s.
func waitStep(t *testing.T, nodes []*Node, s uint64) {
	t.Helper()
	eventuallyNode(t, "outer step", func() bool {
		return !slices.ContainsFunc(nodes, func(n *Node) bool { return stepOf(n) < s })
	})
}

// eventuallyNode polls cond for up to a minute.
func eventuallyNode(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchMembers samples the members' status (members), peer table and ring
// history every 10 ms until the returned function is called, which
// returns the intruders seen in any of them.
func watchMembers(members, intruders []*Node) func() []string {
	done := make(chan struct{})
	var seen []string
	var wg sync.WaitGroup
	is := func(id string) bool {
		return slices.ContainsFunc(intruders, func(n *Node) bool { return string(n.self) == id })
	}
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, m := range members {
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
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() []string {
		close(done)
		wg.Wait()
		return seen
	}
}

// stepOf is the outer step n's status shows (safe while n runs).
func stepOf(n *Node) uint64 { return n.board.snapshot().OuterStep }

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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca := twoNodeConfig(t, 0, false, nil)
	ca.Run, ca.Admission, ca.MinMembers = "allow-late", AdmissionAllowlist, 1
	r := &allowRig{t: t, a: newNode(t, ctx, ca), atHome: true}
	runCtx, stop := context.WithCancel(ctx)
	wg := runNodes(t, runCtx, r.a)
	defer func() { stop(); wg.Wait() }()
	waitStep(t, []*Node{r.a}, 3)
	var blog syncBuffer
	b, err := r.member(ctx, r.a.host.Addrs(), false, &blog, func(id peer.ID) string { return r.issue(id, 0) })
	if err != nil {
		t.Fatal(err)
	}
	bwg := runNodes(t, runCtx, b)
	eventuallyNode(t, "rings of both", func() bool {
		h := b.board.historyList()
		return len(h) >= 3 && h[len(h)-1].Members == 2 && h[len(h)-2].Members == 2
	})
	stop()
	bwg.Wait()
	wg.Wait()
	if !strings.Contains(blog.String(), "model synced") {
		t.Fatalf("the late joiner did not fetch the model:\n%s", blog.String())
	}
	ha := map[uint64]string{}
	for _, rec := range r.a.board.historyList() {
		ha[rec.Step] = rec.ModelHash
	}
	for _, rec := range b.board.historyList()[1:] {
		if rec.Members == 2 && ha[rec.Step] != rec.ModelHash {
			t.Fatalf("step %d: joiner's model %s, creator's %s", rec.Step, short(rec.ModelHash), short(ha[rec.Step]))
		}
	}
}
