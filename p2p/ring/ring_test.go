package ring

import (
	"context"
	"errors"
	"fmt"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/internal/p2ptest"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

func arHost(t testing.TB) host.Host { return p2ptest.Host(t) }

// arLink tells a about b and connects them.
func arLink(t testing.TB, a, b host.Host) {
	t.Helper()
	a.Peerstore().AddAddrs(b.ID(), b.Addrs(), peerstore.PermanentAddrTTL)
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

var arQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// arRing starts k hosts with an all-reduce service each, neighbours
// connected; it returns the hosts, services and the ring's members.
func arRing(t testing.TB, k int, cfg ServiceConfig) ([]host.Host, []*Service, []peer.ID) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = arQuiet
	}
	hs := make([]host.Host, k)
	svcs := make([]*Service, k)
	ids := make([]peer.ID, k)
	for i := range hs {
		hs[i] = arHost(t)
		ids[i] = hs[i].ID()
		var err error
		if svcs[i], err = NewService(hs[i], cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i := range hs {
		if k > 1 {
			arLink(t, hs[i], hs[(i+1)%k])
		}
	}
	return hs, svcs, ids
}

func arVecs(seed uint64, k, n int) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	v := make([][]float32, k)
	for i := range v {
		v[i] = make([]float32, n)
		for j := range v[i] {
			v[i][j] = float32(rng.NormFloat64()) * 1e-3
		}
	}
	return v
}

// arResult is what every member of one libp2p all-reduce got.
type arResult struct {
	out   [][]float32
	stats []collective.Stats
	ring  []Stats
	errs  []error
}

// arRun runs p2p.AllReduce on every member; member i uses run(i) if given.
func arRun(t testing.TB, ctx context.Context, svcs []*Service, ids []peer.ID, ringID string, in [][]float32,
	w []float32, cfg collective.AllReduceConfig) arResult {
	t.Helper()
	k := len(in)
	r := arResult{out: make([][]float32, k), stats: make([]collective.Stats, k), ring: make([]Stats, k), errs: make([]error, k)}
	var wg sync.WaitGroup
	for i := range k {
		r.out[i] = append([]float32(nil), in[i]...)
		wg.Go(func() {
			spec := Spec{ID: ringID, Step: 7, Members: ids, Self: i}
			r.stats[i], r.ring[i], r.errs[i] = AllReduce(ctx, svcs[i], spec, w, collective.Buffers{Dst: r.out[i]}, cfg)
		})
	}
	wg.Wait()
	return r
}

func arCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func arSameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestAllReduceLibp2p: 3 and 4 real hosts on 127.0.0.1 reduce a vector over
// several shards; all end with the same bits, close to the exact mean (the
// compressed codecs: with the bits of the in-memory ring), and the byte
// counts of both layers agree.
func TestAllReduceLibp2p(t *testing.T) {
	for _, tc := range []struct {
		k, n, shards int
		codec        collective.Codec
	}{{4, 100_003, 3, collective.CodecInt8}, {3, 50_000, 2, collective.CodecFP32}, {2, 999, 1, collective.CodecInt8},
		{4, 30_001, 2, collective.CodecTopK}, {3, 20_000, 2, collective.CodecQ4}} {
		t.Run(fmt.Sprintf("k=%d/%v", tc.k, tc.codec), func(t *testing.T) {
			_, svcs, ids := arRing(t, tc.k, ServiceConfig{IOTimeout: 10 * time.Second})
			in := arVecs(1, tc.k, tc.n)
			w := make([]float32, tc.k)
			for i := range w {
				w[i] = float32(10 + i)
			}
			cfg := collective.AllReduceConfig{Shards: tc.shards, ChunkElems: 4096, Codec: tc.codec}
			r := arRun(t, arCtx(t, 30*time.Second), svcs, ids, "ring-a", in, w, cfg)
			for i := range tc.k {
				if r.errs[i] != nil {
					t.Fatalf("member %d: %v", i, r.errs[i])
				}
				if !arSameBits(r.out[0], r.out[i]) {
					t.Fatalf("member %d's result differs from member 0's", i)
				}
				next := (i + 1) % tc.k
				if r.ring[i].BytesSent != r.ring[next].BytesRecv || r.ring[i].BytesSent < r.stats[i].BytesSent {
					t.Fatalf("member %d sent %+v (%+v), its right neighbour received %+v", i, r.ring[i], r.stats[i], r.ring[next])
				}
			}
			if tc.codec == collective.CodecTopK || tc.codec == collective.CodecQ4 {
				if mem := arMemRing(t, in, w, cfg); !arSameBits(r.out[0], mem) {
					t.Fatal("the result differs from the in-memory ring's")
				}
			} else if e := arRelErr(r.out[0], in, w); e > 0.02 {
				t.Fatalf("relative error %.3g", e)
			}
		})
	}
}

// arMemRing runs the same all-reduce over collective's in-memory ring and
// returns member 0's result.
func arMemRing(t *testing.T, in [][]float32, w []float32, cfg collective.AllReduceConfig) []float32 {
	k := len(in)
	trs := collective.NewMemRing(k, cfg.Shards)
	outs := make([][]float32, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		outs[i] = make([]float32, len(in[i]))
		wg.Go(func() {
			_, errs[i] = collective.AllReduceInto(context.Background(), trs[i], i, w, collective.Buffers{Src: in[i], Dst: outs[i]}, cfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("in-memory member %d: %v", i, err)
		}
	}
	return outs[0]
}

// arRelErr is the relative L2 error of got against the float64 weighted mean.
func arRelErr(got []float32, in [][]float32, w []float32) float64 {
	var tot float64
	for _, x := range w {
		tot += float64(x)
	}
	var num, den float64
	for j := range got {
		var want float64
		for i := range in {
			want += float64(w[i]) * float64(in[i][j]) / tot
		}
		num += (float64(got[j]) - want) * (float64(got[j]) - want)
		den += want * want
	}
	return math.Sqrt(num / den)
}

// TestRingEarlyStreams: a member that opens its side late finds the
// streams its left neighbour opened before, held by the service.
func TestRingEarlyStreams(t *testing.T) {
	const k, late, shards = 4, 2, 3
	_, svcs, ids := arRing(t, k, ServiceConfig{IOTimeout: 10 * time.Second})
	queued := make(chan struct{})
	svcs[late].mu.Lock()
	svcs[late].pendingHook = func(n int) {
		if n == shards {
			close(queued)
		}
	}
	svcs[late].mu.Unlock()
	in := arVecs(2, k, 30_000)
	w := []float32{1, 1, 1, 1}
	cfg := collective.AllReduceConfig{Shards: shards, ChunkElems: 1000}
	ctx := arCtx(t, 30*time.Second)
	out := make([][]float32, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		out[i] = append([]float32(nil), in[i]...)
		wg.Go(func() {
			if i == late {
				<-queued
			}
			_, _, errs[i] = AllReduce(ctx, svcs[i], Spec{ID: "early", Step: 7, Members: ids, Self: i}, w, collective.Buffers{Dst: out[i]}, cfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		if !arSameBits(out[0], out[i]) {
			t.Fatalf("member %d differs", i)
		}
	}
}

// arKiller closes its member's host after a number of sends: the member
// dies mid all-reduce, telling nobody (it hides Abort).
type arKiller struct {
	collective.Transport
	left atomic.Int32
	kill func()
}

func (k *arKiller) Send(ctx context.Context, shard int, msg []byte) error {
	if k.left.Add(-1) < 0 {
		k.kill()
		return errors.New("killed")
	}
	return k.Transport.Send(ctx, shard, msg)
}

// TestRingMemberDies: a member's host goes away mid all-reduce; every
// survivor returns, well before the I/O timeout, an error naming it.
func TestRingMemberDies(t *testing.T) {
	const k, dead = 4, 2
	const ioTimeout = 20 * time.Second
	hs, svcs, ids := arRing(t, k, ServiceConfig{IOTimeout: ioTimeout})
	in := arVecs(3, k, 200_000)
	w := []float32{1, 1, 1, 1}
	cfg := collective.AllReduceConfig{Shards: 2, ChunkElems: 2048}
	ctx := arCtx(t, 2*ioTimeout)
	errs := make([]error, k)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range k {
		vec := append([]float32(nil), in[i]...)
		spec := Spec{ID: "dies", Step: 7, Members: ids, Self: i}
		if i != dead {
			wg.Go(func() {
				_, _, errs[i] = AllReduce(ctx, svcs[i], spec, w, collective.Buffers{Dst: vec}, cfg)
				t.Logf("member %d returned after %v: %v", i, time.Since(start), errs[i])
			})
			continue
		}
		wg.Go(func() {
			spec.Shards = cfg.Shards
			tr, err := svcs[i].Open(spec)
			if err != nil {
				errs[i] = err
				return
			}
			kt := &arKiller{Transport: tr, kill: func() { hs[i].Close() }}
			kt.left.Store(5)
			_, errs[i] = collective.AllReduce(ctx, kt, i, w, vec, nil, cfg)
		})
	}
	wg.Wait()
	if el := time.Since(start); el > ioTimeout/2 {
		t.Fatalf("survivors took %v: they waited for a timeout", el)
	}
	for i, err := range errs {
		if i == dead {
			continue
		}
		var rpe *PeerError
		if !errors.As(err, &rpe) || rpe.Peer != ids[dead] {
			t.Fatalf("member %d: got %v, want an error naming %s", i, err, ids[dead])
		}
		t.Logf("member %d: %v", i, err)
	}
	// What the node does next: the survivors retry with a new ring, recomputing their
	// vectors (AllReduce left them unspecified).
	var alive []int
	for i := range k {
		if i != dead {
			alive = append(alive, i)
		}
	}
	members := make([]peer.ID, len(alive))
	for j, i := range alive {
		members[j] = ids[i]
		for _, o := range alive {
			if o != i {
				hs[i].Peerstore().AddAddrs(ids[o], hs[o].Addrs(), peerstore.PermanentAddrTTL)
			}
		}
	}
	outs := make([][]float32, len(alive))
	errs2 := make([]error, len(alive))
	w2 := []float32{1, 2, 3}
	for j, i := range alive {
		outs[j] = append([]float32(nil), in[i]...)
		wg.Go(func() {
			_, _, errs2[j] = AllReduce(ctx, svcs[i], Spec{ID: "dies-retry", Step: 7, Members: members, Self: j}, w2, collective.Buffers{Dst: outs[j]}, cfg)
		})
	}
	wg.Wait()
	for j := range alive {
		if errs2[j] != nil {
			t.Fatalf("retry, member %d: %v", j, errs2[j])
		}
		if !arSameBits(outs[0], outs[j]) {
			t.Fatalf("retry, member %d differs", j)
		}
	}
	if e := arRelErr(outs[0], [][]float32{in[alive[0]], in[alive[1]], in[alive[2]]}, w2); e > 0.02 {
		t.Fatalf("retry: relative error %.3g", e)
	}
}

// arFake is a ring member run by hand: it drains every all-reduce stream
// opened to it, and writes what a test wants on the stream it opens.
func arFake(t *testing.T, victim host.Host) host.Host {
	fake := arHost(t)
	fake.SetStreamHandler(ProtocolID, func(s network.Stream) { _, _ = io.Copy(io.Discard, s) })
	arLink(t, fake, victim)
	arLink(t, victim, fake)
	return fake
}

// arResetCode waits for s to be reset by the remote and returns the code.
func arResetCode(t *testing.T, s network.Stream) network.StreamErrorCode {
	t.Helper()
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, s)
	var se *network.StreamError
	if !errors.As(err, &se) || !se.Remote {
		t.Fatalf("stream ended with %v, want a reset by the remote", err)
	}
	return se.ErrorCode
}

// TestRingGarbage: a neighbour sending garbage gets its stream reset, and
// AllReduce returns an error naming it; nothing panics.
func TestRingGarbage(t *testing.T) {
	validChunkHdr := func(n int) []byte { // a mesh chunk header for step 0, chunk 0, int8
		b := []byte{byte(collective.CodecInt8), 0, 0, 0, 0, 0, 0, 0}
		return append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	cases := map[string]struct {
		write    func(s network.Stream) error
		sentinel error
	}{
		"frame type": {func(s network.Stream) error { return p2p.WriteFrame(s, 9, []byte("hello")) }, ErrProtocol},
		"frame too large": {func(s network.Stream) error {
			_, err := s.Write([]byte{arMsgChunk, 0x7f, 0xff, 0xff, 0xff})
			return err
		}, ErrProtocol},
		"bad chunk": {func(s network.Stream) error { return p2p.WriteFrame(s, arMsgChunk, []byte("garbage")) }, collective.ErrBadChunk},
		"NaN table": {func(s network.Stream) error {
			p := append(validChunkHdr(500), make([]byte, 1024+500)...)
			copy(p[12:], []byte{0, 0, 0xc0, 0x7f})
			return p2p.WriteFrame(s, arMsgChunk, p)
		}, collective.ErrNonFinite},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			victim := arHost(t)
			svc, err := NewService(victim, ServiceConfig{IOTimeout: 10 * time.Second, Logger: arQuiet})
			if err != nil {
				t.Fatal(err)
			}
			fake := arFake(t, victim)
			ids := []peer.ID{victim.ID(), fake.ID()}
			done := make(chan error, 1)
			go func() {
				vec := arVecs(4, 1, 1000)[0]
				_, _, err := AllReduce(arCtx(t, 20*time.Second), svc, Spec{ID: "g", Step: 7, Members: ids, Self: 0},
					[]float32{1, 1}, collective.Buffers{Dst: vec}, collective.AllReduceConfig{Shards: 1, ChunkElems: 500})
				done <- err
			}()
			s, err := fake.NewStream(context.Background(), victim.ID(), ProtocolID)
			if err != nil {
				t.Fatal(err)
			}
			hello := arHello{step: 7, shard: 0, shards: 1, sender: 1, size: 2, ringID: "g"}.encode()
			if err := p2p.WriteFrame(s, arMsgHello, hello); err != nil {
				t.Fatal(err)
			}
			if err := tc.write(s); err != nil {
				t.Fatal(err)
			}
			err = <-done
			var rpe *PeerError
			if !errors.As(err, &rpe) || rpe.Peer != fake.ID() || !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want an error naming %s wrapping %v", err, fake.ID(), tc.sentinel)
			}
			if code := arResetCode(t, s); code != arCodeAbort+1 {
				t.Fatalf("fake's stream reset with %#x, want abort naming member 1", code)
			}
		})
	}
}

// TestRingRejects: streams with a bad hello, for a mismatched attempt, from
// a peer that is not the left neighbour, or never claimed, are reset.
func TestRingRejects(t *testing.T) {
	victim := arHost(t)
	svc, err := NewService(victim, ServiceConfig{PendingTimeout: 50 * time.Millisecond, Logger: arQuiet})
	if err != nil {
		t.Fatal(err)
	}
	fake, stranger := arFake(t, victim), arFake(t, victim)
	tr, err := svc.Open(Spec{ID: "open", Step: 7, Members: []peer.ID{victim.ID(), fake.ID()}, Self: 0, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	good := arHello{step: 7, shard: 0, shards: 2, sender: 1, size: 2, ringID: "open"}
	wrongStep, wrongShards, unknown, otherRun := good, good, good, good
	otherRun.run[0] = 1
	wrongStep.step = 8
	wrongShards.shards = 3
	unknown.ringID = "never opened"
	cases := map[string]struct {
		from    host.Host
		payload []byte
	}{
		"garbage hello":  {fake, []byte("this is not a hello")},
		"wrong version":  {fake, append([]byte{9}, good.encode()[1:]...)},
		"wrong step":     {fake, wrongStep.encode()},
		"wrong shards":   {fake, wrongShards.encode()},
		"not left":       {stranger, good.encode()},
		"other run":      {fake, otherRun.encode()},
		"never claimed":  {fake, unknown.encode()},
		"empty ring id":  {fake, arHello{step: 7, shards: 2, sender: 1, size: 2}.encode()},
		"sender too big": {fake, arHello{step: 7, shards: 2, sender: 2, size: 2, ringID: "open"}.encode()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := tc.from.NewStream(context.Background(), victim.ID(), ProtocolID)
			if err != nil {
				t.Fatal(err)
			}
			if err := p2p.WriteFrame(s, arMsgHello, tc.payload); err != nil {
				t.Fatal(err)
			}
			if code := arResetCode(t, s); code != arCodeRejected {
				t.Fatalf("reset with %#x, want %#x", code, arCodeRejected)
			}
		})
	}
	// The attempt still takes its real stream afterwards.
	s, err := fake.NewStream(context.Background(), victim.ID(), ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2p.WriteFrame(s, arMsgHello, good.encode()); err != nil {
		t.Fatal(err)
	}
	msg := []byte("payload")
	if err := p2p.WriteFrame(s, arMsgChunk, msg); err != nil {
		t.Fatal(err)
	}
	got, err := tr.Recv(arCtx(t, 10*time.Second), 0)
	if err != nil || string(got) != string(msg) {
		t.Fatalf("Recv after rejections: %q, %v", got, err)
	}
}

// TestRingPendingBound: streams waiting for an attempt are bounded.
func TestRingPendingBound(t *testing.T) {
	victim := arHost(t)
	svc, err := NewService(victim, ServiceConfig{MaxPending: 2, Logger: arQuiet})
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan int, 4)
	svc.mu.Lock()
	svc.pendingHook = func(n int) { queued <- n }
	svc.mu.Unlock()
	fake := arFake(t, victim)
	open := func(ring string) network.Stream {
		s, err := fake.NewStream(context.Background(), victim.ID(), ProtocolID)
		if err != nil {
			t.Fatal(err)
		}
		if err := p2p.WriteFrame(s, arMsgHello, arHello{step: 1, shards: 1, sender: 1, size: 2, ringID: ring}.encode()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	open("a")
	open("b")
	if n := <-queued; n != 1 {
		t.Fatalf("first queued as %d", n)
	}
	if n := <-queued; n != 2 {
		t.Fatalf("second queued as %d", n)
	}
	if code := arResetCode(t, open("c")); code != arCodeRejected {
		t.Fatalf("third stream reset with %#x, want %#x", code, arCodeRejected)
	}
	svc.Close()
}

// TestRingSpecInvalid: Open refuses specs it cannot run.
func TestRingSpecInvalid(t *testing.T) {
	h := arHost(t)
	svc, err := NewService(h, ServiceConfig{Logger: arQuiet})
	if err != nil {
		t.Fatal(err)
	}
	other := peer.ID("other")
	for name, sp := range map[string]Spec{
		"no id":        {Members: []peer.ID{h.ID()}, Shards: 1},
		"long id":      {ID: string(make([]byte, MaxIDLen+1)), Members: []peer.ID{h.ID()}, Shards: 1},
		"not a member": {ID: "x", Members: []peer.ID{other}, Shards: 1},
		"self range":   {ID: "x", Members: []peer.ID{h.ID()}, Self: 1, Shards: 1},
		"duplicate":    {ID: "x", Members: []peer.ID{h.ID(), other, other}, Shards: 1},
		"no shards":    {ID: "x", Members: []peer.ID{h.ID()}},
	} {
		if _, err := svc.Open(sp); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	tr, err := svc.Open(Spec{ID: "x", Members: []peer.ID{h.ID()}, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Open(Spec{ID: "x", Members: []peer.ID{h.ID()}, Shards: 1}); err == nil {
		t.Error("same ring id opened twice")
	}
	tr.Close()
	if _, err := svc.Open(Spec{ID: "x", Members: []peer.ID{h.ID()}, Shards: 1}); err == nil {
		t.Error("finished ring id opened again")
	}
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(arHello{step: 1, shard: 2, shards: 8, sender: 3, size: 4, ringID: "abc"}.encode())
	f.Add(arHello{run: [32]byte{7, 8}, step: 1, shards: 1, sender: 1, size: 2, ringID: "r"}.encode())
	f.Add([]byte{arVersion})
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := decodeHello(p)
		if err != nil {
			return
		}
		if h.shard >= h.shards || h.sender >= h.size || h.ringID == "" || len(h.ringID) > MaxIDLen {
			t.Fatalf("accepted %+v", h)
		}
		if string(h.encode()) != string(p) {
			t.Fatalf("re-encoding %+v differs", h)
		}
	})
}
