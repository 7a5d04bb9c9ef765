package ring

import (
	"errors"
	"fmt"
	"github.com/intellect-node/intellect-node/p2p"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

// arHostCM is arHost with a real connection manager, whose protections a
// test can inspect (libp2p's default one protects nothing).
func arHostCM(t testing.TB) host.Host {
	t.Helper()
	cm, err := connmgr.NewConnManager(10, 20)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(
		libp2p.NoTransports, libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay(),
		libp2p.ConnectionManager(cm),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// arRingCM is arRing over arHostCM hosts; the services are closed at the
// end of the test.
func arRingCM(t testing.TB, k int, cfg ServiceConfig) ([]host.Host, []*Service, []peer.ID) {
	t.Helper()
	cfg.Logger = arQuiet
	hs := make([]host.Host, k)
	svcs := make([]*Service, k)
	ids := make([]peer.ID, k)
	for i := range hs {
		hs[i] = arHostCM(t)
		ids[i] = hs[i].ID()
		var err error
		if svcs[i], err = NewService(hs[i], cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svcs[i].Close() })
	}
	for i := range hs {
		arLink(t, hs[i], hs[(i+1)%k])
	}
	return hs, svcs, ids
}

// arProtected lists the (host, peer) pairs of hs protected under any tag.
func arProtected(hs []host.Host, ids []peer.ID) []string {
	var bad []string
	for i, h := range hs {
		for _, p := range ids {
			if h.ConnManager().IsProtected(p, "") {
				bad = append(bad, "host "+ids[i].ShortString()+" protects "+p.ShortString())
			}
		}
	}
	return bad
}

// TestRingProtectionEndsWithAttempt: an open attempt protects its
// neighbours' connections from trimming; once the attempt ends, by success
// or failure, nobody is protected any more.
func TestRingProtectionEndsWithAttempt(t *testing.T) {
	const k = 3
	hs, svcs, ids := arRingCM(t, k, ServiceConfig{IOTimeout: time.Second})
	tr, err := svcs[0].Open(Spec{ID: "open", Step: 7, Members: ids, Self: 0, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	cm := hs[0].ConnManager()
	if !cm.IsProtected(ids[1], "") || !cm.IsProtected(ids[2], "") {
		t.Fatal("an open attempt does not protect its neighbours")
	}
	tr.Close()
	if bad := arProtected(hs, ids); len(bad) > 0 {
		t.Fatalf("after Close: %v", bad)
	}

	w := []float32{1, 1, 1}
	cfg := collective.AllReduceConfig{Shards: 2, ChunkElems: 512}
	r := arRun(t, arCtx(t, 30*time.Second), svcs, ids, "ok", arVecs(1, k, 4000), w, cfg)
	for i, err := range r.errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if bad := arProtected(hs, ids); len(bad) > 0 {
		t.Fatalf("after a successful attempt: %v", bad)
	}

	// Member 2 never opens the attempt: the others fail.
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		vec := arVecs(2, 1, 4000)[0]
		wg.Go(func() {
			spec := Spec{ID: "fails", Step: 8, Members: ids, Self: i}
			_, _, errs[i] = AllReduce(arCtx(t, 30*time.Second), svcs[i], spec, w, collective.Buffers{Dst: vec}, cfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			t.Fatalf("member %d succeeded without member 2", i)
		}
	}
	if bad := arProtected(hs, ids); len(bad) > 0 {
		t.Fatalf("after a failed attempt: %v", bad)
	}
}

// TestRingSendRate: a Spec.SendRate caps what each member sends; the
// same ring without it runs much faster than the cap.
func TestRingSendRate(t *testing.T) {
	const k, rate = 2, 1 << 20 // bytes per second
	_, svcs, ids := arRingCM(t, k, ServiceConfig{})
	in := arVecs(3, k, 400_000) // int8: about 400 kB sent per member
	w := []float32{1, 1}
	cfg := collective.AllReduceConfig{Shards: 2, ChunkElems: 4096}
	for _, limited := range []bool{false, true} {
		var lims []*p2p.Limiter
		for range k {
			lims = append(lims, p2p.NewSendLimiter(rate))
		}
		start := time.Now()
		var sent []int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range k {
			vec := append([]float32(nil), in[i]...)
			wg.Go(func() {
				spec := Spec{ID: "rate-" + map[bool]string{false: "off", true: "on"}[limited], Step: 7, Members: ids, Self: i}
				if limited {
					spec.SendRate = lims[i]
				}
				_, rs, err := AllReduce(arCtx(t, time.Minute), svcs[i], spec, w, collective.Buffers{Dst: vec}, cfg)
				if err != nil {
					t.Errorf("member %d: %v", i, err)
				}
				mu.Lock()
				sent = append(sent, rs.BytesSent)
				mu.Unlock()
			})
		}
		wg.Wait()
		el := time.Since(start)
		// The limiter starts full (a burst of rate/10) and counts payloads
		// only (frame headers and hellos are well under 8 KiB here).
		floor := time.Duration(float64(min(sent[0], sent[1])-rate/10-8<<10) / rate * float64(time.Second))
		t.Logf("limited=%v: %v, %d bytes sent, floor %v", limited, el, sent, floor)
		if limited && el < floor {
			t.Fatalf("limited ring took %v, want ≥ %v", el, floor)
		}
		if !limited && el >= floor {
			t.Skipf("unlimited ring took %v: too slow here to tell the cap apart", el)
		}
	}
}

// arRunning reports whether a goroutine is running fn (a function name as
// it appears in a stack trace).
func arRunning(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn)
}

// arBlackhole is a TCP listener that accepts connections and never answers:
// a libp2p dial to it hangs in the security handshake. accepted receives a
// value for each connection it accepts (dropped when nobody waits).
func arBlackhole(t *testing.T) (id peer.ID, addr ma.Multiaddr, accepted <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	acc := make(chan struct{}, 1)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case acc <- struct{}{}:
			default:
			}
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	if id, err = peer.IDFromPrivateKey(key); err != nil {
		t.Fatal(err)
	}
	return id, ma.StringCast(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", l.Addr().(*net.TCPAddr).Port)), acc
}

// TestServiceCloseJoinsAbortMessages: an aborted attempt keeps telling its
// right neighbour (here one that never answers) after the attempt is
// closed; Service.Close cancels that and waits for it.
func TestServiceCloseJoinsAbortMessages(t *testing.T) {
	h0, left := arHostCM(t), arHostCM(t)
	arLink(t, h0, left)
	right, addr, _ := arBlackhole(t)
	h0.Peerstore().AddAddr(right, addr, peerstore.PermanentAddrTTL)
	svc, err := NewService(h0, ServiceConfig{IOTimeout: time.Minute, Logger: arQuiet})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := svc.Open(Spec{ID: "hangs", Step: 7, Members: []peer.ID{h0.ID(), right, left.ID()}, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	tr.Abort(errors.New("test abort"))
	tr.Close()
	const fn = "(*Transport).tellRight"
	for start := time.Now(); !arRunning(fn); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the abort is not being sent: the test cannot tell whether Close joins it")
		}
	}
	start := time.Now()
	svc.Close()
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("Close took %v", el)
	}
	if arRunning(fn) {
		t.Fatal("the abort message is still being sent after Close")
	}
}

// TestRingCloseJoinsReachLeft: an attempt whose left neighbour is not
// connected dials it (here one that never answers); Close cancels that dial
// and joins it. (The test catches a missing cancel; a missing join only
// loses a race it cannot force.)
func TestRingCloseJoinsReachLeft(t *testing.T) {
	h0, right := arHostCM(t), arHostCM(t)
	arLink(t, h0, right)
	left, addr, dialed := arBlackhole(t)
	h0.Peerstore().AddAddr(left, addr, peerstore.PermanentAddrTTL)
	svc, err := NewService(h0, ServiceConfig{IOTimeout: time.Minute, Logger: arQuiet})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	tr, err := svc.Open(Spec{ID: "reach", Step: 7, Members: []peer.ID{h0.ID(), right.ID(), left}, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	const fn = "(*Transport).reachLeft"
	select {
	case <-dialed: // the dial is in its handshake with the blackhole
	case <-time.After(5 * time.Second):
		t.Fatal("no dial of the left neighbour: the test cannot tell whether Close joins it")
	}
	start := time.Now()
	tr.Close()
	// Uncancelled, the dial would last until libp2p's local dial timeout
	// (5 s) at least.
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %v: the dial was not cancelled", el)
	}
	if arRunning(fn) {
		t.Fatal("the left neighbour is still being dialed after Close")
	}
}
