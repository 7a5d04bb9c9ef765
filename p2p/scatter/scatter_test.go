package scatter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/goleak"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/internal/p2ptest"
	"github.com/intellect-node/intellect-node/p2p/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mesh starts k real hosts on 127.0.0.1, all connected, each with a service.
func mesh(t *testing.T, k int, cfg Config) ([]host.Host, []*Service, []peer.ID) {
	t.Helper()
	hs := make([]host.Host, k)
	for i := range hs {
		hs[i] = p2ptest.Host(t)
	}
	ids := make([]peer.ID, k)
	for i, h := range hs {
		ids[i] = h.ID()
		p2ptest.Connect(t, h, hs[i+1:]...)
	}
	svcs := make([]*Service, k)
	for i, h := range hs {
		s, err := NewService(h, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		svcs[i] = s
	}
	return hs, svcs, ids
}

func vecs(seed uint64, k, n int) [][]float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([][]float32, k)
	for i := range out {
		out[i] = make([]float32, n)
		for j := range out[i] {
			out[i][j] = float32(r.NormFloat64())
		}
	}
	return out
}

type result struct {
	out   [][]float32
	errs  []error
	stats []Stats
}

// run reduces in over svcs; member i first calls before(i) if before is
// set (a late member waits there for something to happen first).
func run(ctx context.Context, svcs []*Service, ids []peer.ID, id string, in [][]float32, w []float32,
	cfg collective.ScatterConfig, before func(int)) result {
	k := len(svcs)
	r := result{out: make([][]float32, k), errs: make([]error, k), stats: make([]Stats, k)}
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			if before != nil {
				before(i)
			}
			r.out[i] = make([]float32, len(in[i]))
			spec := Spec{ID: id, Step: 7, Members: ids, Self: i}
			_, r.stats[i], r.errs[i] = AllReduce(ctx, svcs[i], spec, w, collective.Buffers{Src: in[i], Dst: r.out[i]}, cfg)
		})
	}
	wg.Wait()
	return r
}

func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestScatterLibp2pMatchesMemory: k real hosts end with the same bits, and
// with the bits of the same reduction over the in-memory mesh; one member
// opening its side late finds the streams others opened before.
func TestScatterLibp2pMatchesMemory(t *testing.T) {
	for _, tc := range []struct {
		k, n, shards int
		codec        collective.Codec
	}{{4, 100_003, 3, collective.CodecInt8}, {3, 5000, 1, collective.CodecInt8}, {2, 999, 2, collective.CodecInt8},
		{4, 30_001, 2, collective.CodecTopK}, {3, 20_000, 2, collective.CodecQ4}} {
		t.Run(fmt.Sprintf("k=%d/%v", tc.k, tc.codec), func(t *testing.T) {
			_, svcs, ids := mesh(t, tc.k, Config{IOTimeout: 10 * time.Second})
			in := vecs(1, tc.k, tc.n)
			w := make([]float32, tc.k)
			for i := range w {
				w[i] = float32(10 + i)
			}
			cfg := collective.ScatterConfig{Shards: tc.shards, ChunkElems: 4096, Codec: tc.codec}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			late := func(i int) { // odd members open once others' streams wait for them
				if i%2 == 1 {
					waitPending(t, svcs[i], "attempt-a")
				}
			}
			r := run(ctx, svcs, ids, "attempt-a", in, w, cfg, late)
			mem := memReduce(t, in, w, cfg)
			for i := range tc.k {
				if r.errs[i] != nil {
					t.Fatalf("member %d: %v", i, r.errs[i])
				}
				if !sameBits(r.out[i], mem) {
					t.Fatalf("member %d's result differs from the in-memory reduction", i)
				}
			}
		})
	}
}

// memReduce runs the same reduction over collective's in-memory mesh.
func memReduce(t *testing.T, in [][]float32, w []float32, cfg collective.ScatterConfig) []float32 {
	k := len(in)
	trs := collective.NewMemMesh(k, 2*max(cfg.Shards, 1))
	outs := make([][]float32, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			outs[i] = make([]float32, len(in[i]))
			_, errs[i] = collective.ScatterAllReduce(context.Background(), trs[i], i, w, collective.Buffers{Src: in[i], Dst: outs[i]}, cfg)
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

// TestScatterMemberDies: a member whose host closes mid-attempt is named
// by the others' errors, which come well before the I/O timeout.
func TestScatterMemberDies(t *testing.T) {
	const k = 4
	hs, svcs, ids := mesh(t, k, Config{IOTimeout: 20 * time.Second})
	in := vecs(2, k, 400_000)
	w := []float32{1, 1, 1, 1}
	cfg := collective.ScatterConfig{Shards: 2, ChunkElems: 1024}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Member 3 never opens the attempt, and its host goes away once the
	// others' streams of the attempt have reached it.
	closed := make(chan struct{})
	go func() { defer close(closed); waitPending(t, svcs[3], "attempt-dies"); hs[3].Close() }()
	start := time.Now()
	r := runWithAbsent(ctx, svcs, ids, "attempt-dies", in, w, cfg, 3)
	<-closed
	for i := range 3 {
		var pe *ring.PeerError
		if !errors.As(r.errs[i], &pe) || pe.Peer != ids[3] {
			t.Fatalf("member %d: %v, want a PeerError naming member 3", i, r.errs[i])
		}
	}
	if took := time.Since(start); took > 25*time.Second {
		t.Fatalf("failure took %v", took)
	}
}

// waitPending waits until svc holds a stream of attempt id that arrived
// before this member opened the attempt.
func waitPending(t *testing.T, svc *Service, id string) {
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		svc.mu.Lock()
		n := len(svc.pending[id])
		svc.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("no stream of attempt %s reached the late member", id)
			return
		}
		<-tick.C
	}
}

// runWithAbsent runs the attempt on every member but absent.
func runWithAbsent(ctx context.Context, svcs []*Service, ids []peer.ID, id string, in [][]float32, w []float32,
	cfg collective.ScatterConfig, absent int) result {
	k := len(svcs)
	r := result{out: make([][]float32, k), errs: make([]error, k), stats: make([]Stats, k)}
	var wg sync.WaitGroup
	for i := range k {
		if i == absent {
			continue
		}
		wg.Go(func() {
			r.out[i] = make([]float32, len(in[i]))
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			spec := Spec{ID: id, Step: 7, Members: ids, Self: i}
			_, r.stats[i], r.errs[i] = AllReduce(actx, svcs[i], spec, w, collective.Buffers{Src: in[i], Dst: r.out[i]}, cfg)
		})
	}
	wg.Wait()
	return r
}

// TestScatterGarbage: malformed hellos and frames are refused; the service
// then still serves a clean attempt.
func TestScatterGarbage(t *testing.T) {
	hs, svcs, ids := mesh(t, 2, Config{IOTimeout: 5 * time.Second, HandshakeTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bad := [][]byte{
		{msgChunk, 0, 0, 0, 1, 0},
		append([]byte{msgHello, 0, 0, 0, 3}, 9, 9, 9),
		append([]byte{msgHello, 0, 0, 0, byte(helloFixed + 1)}, hello{members: 2, lanes: 2, id: "x"}.encode()...),
	}
	bad[2][p2p.FrameHeaderSize] = 99 // wrong version
	other := hello{run: [32]byte{1}, members: 2, lanes: 2, id: "after-garbage"}.encode()
	bad = append(bad, append([]byte{msgHello, 0, 0, 0, byte(len(other))}, other...)) // another run
	for _, b := range bad {
		s, err := hs[1].NewStream(ctx, ids[0], ProtocolID)
		if err != nil {
			t.Fatal(err)
		}
		s.Write(b)
		s.Close()
	}
	in := vecs(3, 2, 1000)
	r := run(ctx, svcs, ids, "after-garbage", in, []float32{1, 1}, collective.ScatterConfig{Shards: 1, ChunkElems: 256}, nil)
	for i, err := range r.errs {
		if err != nil {
			t.Fatalf("member %d after garbage: %v", i, err)
		}
	}
}

// TestStreamsAndLanes: a member opens min(lanes, maxStreams) streams to
// another; a hello naming a stream beyond them and a chunk of a lane that
// belongs to another stream are protocol errors.
func TestStreamsAndLanes(t *testing.T) {
	for lanes, want := range map[int]int{1: 1, 2: 2, 8: 8, 9: 8, maxLanes: 8} {
		if got := streamsFor(lanes); got != want {
			t.Errorf("streamsFor(%d) = %d, want %d", lanes, got, want)
		}
	}
	h := hello{members: 2, lanes: 2, stream: 1, id: "x"}
	if _, err := decodeHello(h.encode()); err != nil {
		t.Fatalf("stream 1 of 2: %v", err)
	}
	h.stream = 2
	if _, err := decodeHello(h.encode()); !errors.Is(err, ErrProtocol) {
		t.Fatalf("stream 2 of 2 lanes decoded: %v", err)
	}
	tr := &Transport{svc: &Service{cfg: Config{MaxBuffered: 1 << 20}}, spec: Spec{Lanes: 10, Members: make([]peer.ID, 2)}, nstreams: streamsFor(10)}
	in := &inbox{lanes: make([][][]byte, 10), wake: make(chan struct{})}
	for _, c := range []struct{ lane, stream int }{{1, 1}, {9, 1}, {8, 0}} {
		if err := tr.take(in, 1, c.stream, msgChunk, []byte{0, byte(c.lane), 7}); err != nil {
			t.Fatalf("lane %d on stream %d: %v", c.lane, c.stream, err)
		}
	}
	if err := tr.take(in, 1, 2, msgChunk, []byte{0, 1, 7}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("lane 1 on stream 2 taken: %v", err)
	}
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(hello{run: [32]byte{7}, step: 3, sender: 1, members: 4, lanes: 8, stream: 5, id: "abc"}.encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := decodeHello(p)
		if err != nil {
			return
		}
		if again, err := decodeHello(h.encode()); err != nil || again != h {
			t.Fatalf("round trip %+v: %+v %v", h, again, err)
		}
	})
}

func FuzzDecodeFrames(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, 4, 3)
	f.Fuzz(func(t *testing.T, p []byte, lanes, members int) {
		lanes, members = max(1, lanes%maxLanes+1), max(2, members%MaxMembers+1)
		if lane, msg, err := decodeChunk(p, lanes); err == nil && (lane >= lanes || len(msg) != len(p)-2) {
			t.Fatalf("chunk lane %d of %d, %d bytes of %d", lane, lanes, len(msg), len(p))
		}
		if r, err := decodeAbort(p, members); err == nil && (r >= members || len(p) != 2) {
			t.Fatalf("abort names %d of %d", r, members)
		}
	})
}
