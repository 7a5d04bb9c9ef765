package ckpt

import (
	"bytes"
	"context"
	"errors"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/internal/p2ptest"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func ckptHost(t testing.TB) host.Host { return p2ptest.Host(t) }

func ckptConnect(t testing.TB, from host.Host, to ...host.Host) []peer.ID {
	return p2ptest.Connect(t, from, to...)
}

// ckptTestSnapshot builds a snapshot of about size bytes (¾ θ₀, ¼ v).
func ckptTestSnapshot(step uint64, size, chunkSize int, seed uint32) *Snapshot {
	s := EncodeSnapshot(step, ckptFloats(size*3/16, seed), ckptFloats(size/16, seed+1), []byte(`{"outer_step":1}`))
	s.ChunkSize = chunkSize
	return s
}

// ckptServe starts a real donor on a new host serving snap.
func ckptServe(t testing.TB, snap *Snapshot, cfg ServeConfig) (host.Host, *Server) {
	t.Helper()
	h := ckptHost(t)
	cfg.Rate = cmpOr(cfg.Rate, -1)
	srv, err := Serve(h, func() *Snapshot { return snap }, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return h, srv
}

// ckptFaultMode selects how a misbehaving test donor deviates from the protocol.
type ckptFaultMode int

const (
	ckptCorrupt     ckptFaultMode = iota // flips a byte in every chunk
	ckptStall                            // answers two chunks, then never again
	ckptBadManifest                      // answers a manifest whose root is wrong
	ckptWrongType                        // answers chunk requests with a manifest frame
)

// ckptFaultyDonor serves snap over the real wire protocol on a real host,
// deviating as mode says. It is a peer we do not control, written out in
// full rather than as a hook in the donor code.
func ckptFaultyDonor(t testing.TB, snap *Snapshot, mode ckptFaultMode) host.Host {
	t.Helper()
	h := ckptHost(t)
	man, err := ckptBuildManifest(snap)
	if err != nil {
		t.Fatal(err)
	}
	h.SetStreamHandler(ProtocolID, func(s network.Stream) {
		defer s.Reset()
		served := 0
		for {
			typ, p, err := p2p.ReadFrame(s, ckptMaxRequest, nil)
			if err != nil {
				return
			}
			if typ == ckptMsgManifestReq {
				enc := man.encode()
				if mode == ckptBadManifest {
					enc[60] ^= 1
				}
				p2p.WriteFrame(s, ckptMsgManifest, enc)
				continue
			}
			i, _ := ckptDecodeChunkReq(p)
			off, end := man.chunkRange(i)
			chunk := append([]byte(nil), snap.Data[off:end]...)
			switch {
			case mode == ckptCorrupt:
				chunk[len(chunk)/2] ^= 0x40
			case mode == ckptStall && served >= 2:
				continue // read on, answer nothing, until the joiner resets
			case mode == ckptWrongType:
				p2p.WriteFrame(s, ckptMsgManifest, man.encode())
				continue
			}
			served++
			p2p.WriteFrame(s, ckptMsgChunk, chunk)
		}
	})
	return h
}

// ckptProgressLog records every progress report.
type ckptProgressLog struct {
	mu   sync.Mutex
	all  []Progress
	busy atomic.Bool
}

func (l *ckptProgressLog) record(p Progress) {
	if l.busy.Swap(true) {
		panic("progress callbacks overlap")
	}
	defer l.busy.Store(false)
	l.mu.Lock()
	l.all = append(l.all, p)
	l.mu.Unlock()
}

func (l *ckptProgressLog) last() Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all[len(l.all)-1]
}

// ckptFetch runs Fetch for snap's step and hash.
func ckptFetch(t testing.TB, j host.Host, donors []peer.ID, snap *Snapshot, cfg FetchConfig, pl *ckptProgressLog) ([]byte, []peer.ID, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cb func(Progress)
	if pl != nil {
		cb = pl.record
	}
	return Fetch(ctx, j, donors, FetchSpec{Step: snap.Step, Hash: snap.Hash}, cfg, cb)
}

func TestCkptFetchFromThreeDonors(t *testing.T) {
	snap := ckptTestSnapshot(5, 16<<20, 256<<10, 1)
	j := ckptHost(t)
	var hosts []host.Host
	var srvs []*Server
	for range 3 {
		h, s := ckptServe(t, snap, ServeConfig{})
		hosts, srvs = append(hosts, h), append(srvs, s)
	}
	ids := ckptConnect(t, j, hosts...)
	var pl ckptProgressLog
	data, bad, err := ckptFetch(t, j, ids, snap, FetchConfig{}, &pl)
	if err != nil || len(bad) != 0 {
		t.Fatalf("err %v bad %v", err, bad)
	}
	if !bytes.Equal(data, snap.Data) {
		t.Fatal("fetched data differs from the snapshot")
	}
	p := pl.last()
	n := ckptNumChunks(int64(len(snap.Data)), snap.ChunkSize)
	if p.BytesDone != int64(len(snap.Data)) || p.BytesTotal != p.BytesDone || p.ChunksDone != n || p.ChunksRetried != 0 {
		t.Fatalf("final progress %+v", p)
	}
	var prev int64
	for _, q := range pl.all {
		if q.BytesDone < prev || q.BytesTotal != p.BytesTotal {
			t.Fatalf("progress not monotonic: %d after %d", q.BytesDone, prev)
		}
		prev = q.BytesDone
	}
	if pl.all[0].Donors != 3 {
		t.Fatalf("first progress reports %d donors, want 3", pl.all[0].Donors)
	}
	for i, s := range srvs {
		st := s.Stats()
		t.Logf("donor %d served %d chunks", i, st.ChunksServed)
		// Each worker requests Pipeline (8) chunks at once, so every donor
		// serves at least 8; all of them must have delivered some.
		if int(st.ChunksServed) < max(p.ByDonor[ids[i]], n/8) || p.ByDonor[ids[i]] < 1 {
			t.Fatalf("donor %d served %d chunks (joiner counted %d) of %d: spread too uneven",
				i, st.ChunksServed, p.ByDonor[ids[i]], n)
		}
	}
}

func TestCkptCorruptDonorReported(t *testing.T) {
	snap := ckptTestSnapshot(5, 4<<20, 128<<10, 2)
	j := ckptHost(t)
	good1, _ := ckptServe(t, snap, ServeConfig{})
	evil := ckptFaultyDonor(t, snap, ckptCorrupt)
	good2, _ := ckptServe(t, snap, ServeConfig{})
	ids := ckptConnect(t, j, good1, evil, good2)
	var pl ckptProgressLog
	data, bad, err := ckptFetch(t, j, ids, snap, FetchConfig{}, &pl)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, snap.Data) {
		t.Fatal("fetched data differs from the snapshot")
	}
	if !slices.Equal(bad, []peer.ID{evil.ID()}) {
		t.Fatalf("bad donors %v, want [%s]", bad, evil.ID())
	}
	p := pl.last()
	if p.ChunksRetried < 1 || p.BadDonors != 1 || p.ByDonor[evil.ID()] != 0 {
		t.Fatalf("progress %+v: want ≥1 retried, 1 bad, nothing accepted from the bad donor", p)
	}
}

func TestCkptStalledDonorTimeout(t *testing.T) {
	// Without the endgame, the stalled donor's chunks wait for its chunk
	// timeout; then they go back to the queue and the good donor fetches them.
	snap := ckptTestSnapshot(5, 4<<20, 128<<10, 3)
	j := ckptHost(t)
	good, _ := ckptServe(t, snap, ServeConfig{})
	slow := ckptFaultyDonor(t, snap, ckptStall)
	ids := ckptConnect(t, j, slow, good)
	var pl ckptProgressLog
	const timeout = 500 * time.Millisecond
	start := time.Now()
	data, bad, err := ckptFetch(t, j, ids, snap, FetchConfig{ChunkTimeout: timeout, DisableEndgame: true}, &pl)
	if err != nil || len(bad) != 0 {
		t.Fatalf("err %v bad %v (a slow donor is not a bad one)", err, bad)
	}
	if el := time.Since(start); el < timeout {
		t.Fatalf("done in %v, before the stalled donor's chunks could time out", el)
	}
	if !bytes.Equal(data, snap.Data) {
		t.Fatal("fetched data differs from the snapshot")
	}
	p := pl.last()
	if p.ChunksRetried < 1 || p.ChunksDuplicated != 0 || p.ByDonor[slow.ID()] > 2 {
		t.Fatalf("progress %+v: want the stalled donor's chunks retried after the timeout", p)
	}
	droppedMidway := slices.ContainsFunc(pl.all, func(q Progress) bool {
		return q.Donors == 1 && q.ChunksDone < q.ChunksTotal
	})
	if !droppedMidway {
		t.Fatal("the stalled donor was not dropped before the download ended")
	}
}

func TestCkptStalledDonorEndgame(t *testing.T) {
	// With a long chunk timeout, the good donor requests the stalled
	// donor's chunks as well once it runs out of work, and the download
	// ends long before the timeout.
	snap := ckptTestSnapshot(5, 4<<20, 128<<10, 3)
	j := ckptHost(t)
	good, _ := ckptServe(t, snap, ServeConfig{})
	slow := ckptFaultyDonor(t, snap, ckptStall)
	ids := ckptConnect(t, j, slow, good)
	var pl ckptProgressLog
	const timeout = 30 * time.Second
	start := time.Now()
	data, bad, err := ckptFetch(t, j, ids, snap, FetchConfig{ChunkTimeout: timeout}, &pl)
	if el := time.Since(start); el > timeout/3 {
		t.Fatalf("download took %v: the endgame did not route around the stalled donor", el)
	}
	if err != nil || len(bad) != 0 || !bytes.Equal(data, snap.Data) {
		t.Fatalf("err %v bad %v", err, bad)
	}
	if p := pl.last(); p.ChunksDuplicated < 1 || p.ByDonor[slow.ID()] > 2 || p.ByDonor[good.ID()] < p.ChunksTotal-2 {
		t.Fatalf("progress %+v: want the stalled donor's chunks duplicated", p)
	}
}

func TestCkptOtherStepIgnored(t *testing.T) {
	snap := ckptTestSnapshot(5, 2<<20, 128<<10, 4)
	j := ckptHost(t)
	good, _ := ckptServe(t, snap, ServeConfig{})
	ahead, aheadSrv := ckptServe(t, ckptTestSnapshot(6, 2<<20, 128<<10, 5), ServeConfig{})
	ids := ckptConnect(t, j, ahead, good)
	data, bad, err := ckptFetch(t, j, ids, snap, FetchConfig{}, nil)
	if err != nil || len(bad) != 0 || !bytes.Equal(data, snap.Data) {
		t.Fatalf("err %v bad %v", err, bad)
	}
	if st := aheadSrv.Stats(); st.Transfers != 1 || st.ChunksServed != 0 {
		t.Fatalf("donor at another step: %+v, want one manifest and no chunks", st)
	}
	// Same step, different model (e.g. the other side of a partition).
	other := ckptTestSnapshot(5, 2<<20, 128<<10, 6)
	_, _, err = ckptFetch(t, j, []peer.ID{ahead.ID()}, other, FetchConfig{}, nil)
	if !errors.Is(err, ErrNoDonors) || !errors.Is(err, ErrMovedOn) {
		t.Fatalf("want ErrNoDonors and ErrMovedOn from a donor a step ahead, got %v", err)
	}
	// A donor behind: not moved on.
	_, _, err = ckptFetch(t, j, []peer.ID{good.ID()}, ckptTestSnapshot(7, 2<<20, 128<<10, 6), FetchConfig{}, nil)
	if !errors.Is(err, ErrNoDonors) || errors.Is(err, ErrMovedOn) {
		t.Fatalf("want ErrNoDonors without ErrMovedOn from a donor behind, got %v", err)
	}
}

func TestCkptAllDonorsBad(t *testing.T) {
	snap := ckptTestSnapshot(5, 1<<20, 128<<10, 7)
	j := ckptHost(t)
	e1, e2 := ckptFaultyDonor(t, snap, ckptCorrupt), ckptFaultyDonor(t, snap, ckptWrongType)
	ids := ckptConnect(t, j, e1, e2)
	data, bad, err := ckptFetch(t, j, ids, snap, FetchConfig{}, nil)
	if !errors.Is(err, ErrNoDonors) || data != nil {
		t.Fatalf("want ErrNoDonors, got %v", err)
	}
	slices.Sort(bad)
	slices.Sort(ids)
	if !slices.Equal(bad, ids) {
		t.Fatalf("bad %v, want both donors %v", bad, ids)
	}
	t.Logf("error: %v", err)
}

func TestCkptBadManifestDonor(t *testing.T) {
	snap := ckptTestSnapshot(5, 1<<20, 128<<10, 8)
	j := ckptHost(t)
	good, _ := ckptServe(t, snap, ServeConfig{})
	evil := ckptFaultyDonor(t, snap, ckptBadManifest)
	ids := ckptConnect(t, j, evil, good)
	data, bad, err := ckptFetch(t, j, ids, snap, FetchConfig{}, nil)
	if err != nil || !bytes.Equal(data, snap.Data) || !slices.Equal(bad, []peer.ID{evil.ID()}) {
		t.Fatalf("err %v bad %v", err, bad)
	}
}

func TestCkptThetaHashVerified(t *testing.T) {
	// Donors agree on a manifest whose chunks verify, but θ₀ is not the
	// model the mesh gossips: the whole check catches it.
	want := ckptTestSnapshot(5, 1<<20, 128<<10, 9)
	liar := ckptTestSnapshot(5, 1<<20, 128<<10, 10)
	liar.Hash = want.Hash
	j := ckptHost(t)
	h1, _ := ckptServe(t, liar, ServeConfig{})
	h2, _ := ckptServe(t, liar, ServeConfig{})
	ids := ckptConnect(t, j, h1, h2)
	_, bad, err := ckptFetch(t, j, ids, want, FetchConfig{}, nil)
	if !errors.Is(err, ErrNoDonors) || len(bad) != 2 {
		t.Fatalf("want ErrNoDonors with 2 bad donors, got %v, %v", err, bad)
	}
}

func TestCkptDonorMovesOnDuringTransfer(t *testing.T) {
	snap := ckptTestSnapshot(5, 2<<20, 128<<10, 11)
	next := ckptTestSnapshot(6, 2<<20, 128<<10, 12)
	var cur atomic.Pointer[Snapshot]
	cur.Store(snap)
	h := ckptHost(t)
	srv, err := Serve(h, cur.Load, ServeConfig{Rate: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Prepare(); err != nil {
		t.Fatal(err)
	}
	j := ckptHost(t)
	ids := ckptConnect(t, j, h)
	ctx := context.Background()
	data, _, err := Fetch(ctx, j, ids, FetchSpec{Step: snap.Step, Hash: snap.Hash}, FetchConfig{Pipeline: 1},
		func(p Progress) {
			if p.ChunksDone == 1 {
				cur.Store(next) // the node finished an outer step mid-download
			}
		})
	if err != nil || !bytes.Equal(data, snap.Data) {
		t.Fatalf("the stream should keep serving the snapshot it pinned: %v", err)
	}
	if data, _, err = Fetch(ctx, j, ids, FetchSpec{Step: next.Step, Hash: next.Hash}, FetchConfig{}, nil); err != nil || !bytes.Equal(data, next.Data) {
		t.Fatalf("new step: %v", err)
	}
}

func TestCkptBusyAndMaxTransfers(t *testing.T) {
	snap := ckptTestSnapshot(5, 1<<20, 128<<10, 13)
	h, srv := ckptServe(t, snap, ServeConfig{MaxTransfers: 1})
	j := ckptHost(t)
	ids := ckptConnect(t, j, h)
	// Hold the only slot with a stream that got its manifest.
	s, err := j.NewStream(context.Background(), h.ID(), ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := ckptParseHash(snap.Hash)
	p2p.WriteFrame(s, ckptMsgManifestReq, ckptEncodeManifestReq(snap.Step, hash, [32]byte{}))
	if typ, _, err := p2p.ReadFrame(s, ckptMaxManifest, nil); err != nil || typ != ckptMsgManifest {
		t.Fatalf("manifest: %d %v", typ, err)
	}
	_, _, err = ckptFetch(t, j, ids, snap, FetchConfig{BusyRetries: -1}, nil)
	if !errors.Is(err, ErrNoDonors) || srv.Stats().Refused != 1 {
		t.Fatalf("want busy refusal, got %v, %+v", err, srv.Stats())
	}
	// Once the slot is released the joiner gets through; if its first
	// manifest request races the release, it is refused and retries.
	s.Close()
	data, _, err := ckptFetch(t, j, ids, snap, FetchConfig{BusyBackoff: 100 * time.Millisecond}, nil)
	if err != nil || !bytes.Equal(data, snap.Data) {
		t.Fatalf("after release: %v", err)
	}
}

func TestCkptServerRejectsMalformed(t *testing.T) {
	snap := ckptTestSnapshot(5, 1<<20, 128<<10, 14)
	h, _ := ckptServe(t, snap, ServeConfig{})
	j := ckptHost(t)
	ids := ckptConnect(t, j, h)
	hash, _ := ckptParseHash(snap.Hash)
	for _, tc := range []struct {
		name   string
		frames func(w io.Writer)
	}{
		{"unknown type", func(w io.Writer) { p2p.WriteFrame(w, 99, nil) }},
		{"oversized frame", func(w io.Writer) { w.Write([]byte{ckptMsgChunkReq, 0x40, 0, 0, 0}) }},
		{"chunk before manifest", func(w io.Writer) { p2p.WriteFrame(w, ckptMsgChunkReq, ckptEncodeChunkReq(0)) }},
		{"short manifest request", func(w io.Writer) { p2p.WriteFrame(w, ckptMsgManifestReq, []byte{1, 2}) }},
		{"chunk out of range", func(w io.Writer) {
			p2p.WriteFrame(w, ckptMsgManifestReq, ckptEncodeManifestReq(snap.Step, hash, [32]byte{}))
			p2p.WriteFrame(w, ckptMsgChunkReq, ckptEncodeChunkReq(1<<20))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := j.NewStream(context.Background(), h.ID(), ProtocolID)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Reset()
			s.SetDeadline(time.Now().Add(10 * time.Second))
			tc.frames(s)
			for { // the donor may answer the manifest first; then it must reset
				typ, _, err := p2p.ReadFrame(s, ckptMaxManifest, nil)
				if err != nil {
					if !errors.Is(err, network.ErrReset) {
						t.Fatalf("want a reset stream, got %v", err)
					}
					break
				}
				if typ != ckptMsgManifest {
					t.Fatalf("unexpected frame type %d", typ)
				}
			}
		})
	}
	data, _, err := ckptFetch(t, j, ids, snap, FetchConfig{}, nil)
	if err != nil || !bytes.Equal(data, snap.Data) {
		t.Fatalf("donor unusable after malformed input: %v", err)
	}
}

func TestCkptRateLimit(t *testing.T) {
	const rate = 8 << 20
	snap := ckptTestSnapshot(5, 2<<20, 128<<10, 15)
	h, _ := ckptServe(t, snap, ServeConfig{Rate: rate, Burst: 256 << 10})
	j := ckptHost(t)
	ids := ckptConnect(t, j, h)
	start := time.Now()
	if _, _, err := ckptFetch(t, j, ids, snap, FetchConfig{}, nil); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	min := time.Duration(float64(len(snap.Data)-256<<10) / rate * float64(time.Second))
	if el < min {
		t.Fatalf("fetched %d bytes in %v; a %d B/s limit allows no less than %v", len(snap.Data), el, rate, min)
	}
}

func TestCkptCancel(t *testing.T) {
	snap := ckptTestSnapshot(5, 2<<20, 64<<10, 16)
	h, _ := ckptServe(t, snap, ServeConfig{Rate: 4 << 20})
	j := ckptHost(t)
	ids := ckptConnect(t, j, h)
	ctx, cancel := context.WithCancel(context.Background())
	_, _, err := Fetch(ctx, j, ids, FetchSpec{Step: snap.Step, Hash: snap.Hash}, FetchConfig{},
		func(p Progress) {
			if p.ChunksDone == 1 {
				cancel()
			}
		})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

// TestCkptOtherRun: a donor serves only joiners that name its run
// manifest; one of another run is never a donor.
func TestCkptOtherRun(t *testing.T) {
	snap := ckptTestSnapshot(5, 1<<20, 128<<10, 3)
	h := ckptHost(t)
	srv, err := Serve(h, func() *Snapshot { return snap }, ServeConfig{Rate: -1, Run: [32]byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	j := ckptHost(t)
	ids := ckptConnect(t, j, h)
	ctx := context.Background()
	want := FetchSpec{Step: snap.Step, Hash: snap.Hash, Run: [32]byte{2}}
	_, bad, err := Fetch(ctx, j, ids, want, FetchConfig{}, nil)
	if !errors.Is(err, ErrNoDonors) || !strings.Contains(err.Error(), "another run") || len(bad) != 0 {
		t.Fatalf("fetch from a donor of another run: %v (bad %v), want ErrNoDonors naming another run", err, bad)
	}
	want.Run = [32]byte{1}
	if data, _, err := Fetch(ctx, j, ids, want, FetchConfig{}, nil); err != nil || !bytes.Equal(data, snap.Data) {
		t.Fatalf("fetch within the run: %v", err)
	}
}

func TestCkptBadSpec(t *testing.T) {
	j := ckptHost(t)
	_, _, err := Fetch(context.Background(), j, nil, FetchSpec{Step: 1, Hash: "xyz"}, FetchConfig{}, nil)
	if !errors.Is(err, ErrBadSpec) {
		t.Fatalf("want ErrBadSpec, got %v", err)
	}
}

func TestCkptFetchSizes(t *testing.T) {
	j := ckptHost(t)
	const cs = MinChunkSize
	for _, tc := range []struct {
		name       string
		nTheta, nV int
		state      string
	}{
		{"empty θ₀", 0, 10, ""},
		{"one chunk", 3, 3, "{}"},
		{"exact multiple", (2*cs - ckptHeaderSize - 4*10) / 4, 10, ""},
		{"one byte into the next chunk", (2*cs - ckptHeaderSize) / 4, 0, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := EncodeSnapshot(3, ckptFloats(tc.nTheta, 30), ckptFloats(tc.nV, 31), []byte(tc.state))
			snap.ChunkSize = cs
			h1, _ := ckptServe(t, snap, ServeConfig{})
			h2, _ := ckptServe(t, snap, ServeConfig{})
			data, bad, err := ckptFetch(t, j, ckptConnect(t, j, h1, h2), snap, FetchConfig{}, nil)
			if err != nil || len(bad) != 0 || !bytes.Equal(data, snap.Data) {
				t.Fatalf("%d bytes: err %v bad %v", len(snap.Data), err, bad)
			}
			theta, v, state, err := DecodeSnapshot(data)
			if err != nil || len(theta) != tc.nTheta || len(v) != tc.nV || string(state) != tc.state {
				t.Fatalf("decode: %v", err)
			}
		})
	}
}

func TestCkptServerBadSnapshot(t *testing.T) {
	snap := ckptTestSnapshot(5, 1<<20, 128<<10, 40)
	broken := *snap
	broken.ChunkSize = 1000 // below MinChunkSize
	h, srv := ckptServe(t, &broken, ServeConfig{})
	if err := srv.Prepare(); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("Prepare: want ErrSnapshot, got %v", err)
	}
	j := ckptHost(t)
	_, _, err := ckptFetch(t, j, ckptConnect(t, j, h), snap, FetchConfig{}, nil)
	if !errors.Is(err, ErrNoDonors) {
		t.Fatalf("a donor with an unservable snapshot must answer none: %v", err)
	}
}

// TestCkptYieldNests: Yield calls nest, and a donor without a rate cap
// ignores them.
func TestCkptYieldNests(t *testing.T) {
	_, capped := ckptServe(t, nil, ServeConfig{Rate: 1 << 20})
	capped.Yield(true)
	capped.Yield(true)
	capped.Yield(false)
	if capped.yields != 1 {
		t.Fatalf("%d yields after on, on, off; want 1", capped.yields)
	}
	capped.Yield(false)
	capped.Yield(false) // one off too many stays at 0
	if capped.yields != 0 {
		t.Fatalf("%d yields, want 0", capped.yields)
	}
	_, free := ckptServe(t, nil, ServeConfig{Rate: -1})
	free.Yield(true)
	if free.yields != 0 {
		t.Fatal("an unlimited donor counted a yield")
	}
}

// A step update travels on its own protocol, named by the hash of the model
// it makes; its Δ̄ is not checked against that hash (the caller applies it
// and checks the result), and a snapshot donor does not answer for it.
func TestCkptUpdate(t *testing.T) {
	avg := ckptFloats(1<<18, 3)
	makes := ckptTestSnapshot(8, 1<<20, 128<<10, 4).Hash // any model hash
	up := EncodeUpdate(7, makes, avg, []byte(`{"step":8}`))
	up.ChunkSize = 128 << 10
	j := ckptHost(t)
	h, _ := ckptServe(t, up, ServeConfig{Update: true})
	snapDonor, _ := ckptServe(t, up, ServeConfig{})
	ids := ckptConnect(t, j, h, snapDonor)
	data, bad, err := ckptFetch(t, j, ids[:1], up, FetchConfig{Update: true}, nil)
	if err != nil || len(bad) > 0 {
		t.Fatalf("fetch update: %v, bad %v", err, bad)
	}
	got, state, err := DecodeUpdate(data)
	if err != nil || !slices.Equal(got, avg) || string(state) != `{"step":8}` {
		t.Fatalf("decoded update: %v, %d values, state %q", err, len(got), state)
	}
	// Without Update the θ₀ region must hash to the name: refused.
	if _, _, err := ckptFetch(t, j, ids[1:], up, FetchConfig{}, nil); !errors.Is(err, ErrNoDonors) {
		t.Fatalf("an update fetched as a snapshot: %v", err)
	}
	// An update donor does not speak the snapshot protocol, nor the reverse.
	if _, _, err := ckptFetch(t, j, ids[:1], up, FetchConfig{}, nil); !errors.Is(err, ErrNoDonors) {
		t.Fatalf("snapshot fetch from an update donor: %v", err)
	}
	if _, _, err := DecodeUpdate(ckptTestSnapshot(1, 1<<16, 64<<10, 5).Data); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("a snapshot decoded as an update: %v", err)
	}
}

// A step update packs Δ̄ losslessly: runs of values from small tables (an
// int8 codec's chunks) take about a byte a value, others four, and decoding
// gives back every bit, NaN payloads and signed zeros included.
func TestCkptUpdatePacking(t *testing.T) {
	const chunk = 64 << 10
	rng := rand.New(rand.NewPCG(1, 2))
	n := 5*chunk + 123
	avg := make([]float32, n)
	table := make([]float32, 256)
	for i := range avg {
		if i%chunk == 0 { // each chunk its own table
			for j := range table {
				table[j] = float32(rng.NormFloat64())
			}
		}
		avg[i] = table[rng.IntN(len(table))]
	}
	avg[5] = float32(math.Copysign(0, -1))
	avg[6] = math.Float32frombits(0x7fc00123) // a NaN with a payload
	raw := 3*chunk + 7
	for i := raw; i < raw+1000; i++ { // a run of distinct values
		avg[i] = float32(i) * 1e-3
	}
	up := EncodeUpdate(3, "h", avg, []byte(`{}`))
	got, state, err := DecodeUpdate(up.Data)
	if err != nil || string(state) != `{}` || len(got) != n {
		t.Fatalf("decode: %v, %d values, state %q", err, len(got), state)
	}
	for i := range avg {
		if math.Float32bits(got[i]) != math.Float32bits(avg[i]) {
			t.Fatalf("value %d: %08x, want %08x", i, math.Float32bits(got[i]), math.Float32bits(avg[i]))
		}
	}
	per := float64(len(up.Data)) / float64(n)
	t.Logf("%d values in %d bytes (%.3f a value)", n, len(up.Data), per)
	if per > 1.15 {
		t.Fatalf("%.3f bytes a value, want ≤ 1.15", per)
	}
	for _, c := range [][]byte{
		up.Data[:len(up.Data)-3], // cut
		append(slices.Clone(up.Data), 0),
		ckptTestSnapshot(1, 1<<16, 64<<10, 5).Data, // a snapshot
	} {
		if _, _, err := DecodeUpdate(c); !errors.Is(err, ErrSnapshot) {
			t.Fatalf("bad container decoded: %v", err)
		}
	}
	if _, _, _, err := DecodeSnapshot(up.Data); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("an update decoded as a snapshot: %v", err)
	}
	// Values without a small table go raw: no more than 4 bytes and a bit.
	fp := ckptFloats(100_000, 4)
	if u := EncodeUpdate(1, "h", fp, nil); len(u.Data) > ckptHeaderSize+4*len(fp)+5 {
		t.Fatalf("%d distinct-ish values packed into %d bytes", len(fp), len(u.Data))
	}
}

// FuzzCkptDecodeUpdate: no input makes DecodeUpdate panic or return values
// it did not find in the input, and what it decodes packs back to a
// container that decodes to the same values.
func FuzzCkptDecodeUpdate(f *testing.F) {
	f.Add(EncodeUpdate(1, "h", []float32{1, 2, 2, 1, 0}, []byte(`{}`)).Data)
	f.Add(EncodeUpdate(1, "h", ckptFloats(5000, 9), nil).Data)
	f.Fuzz(func(t *testing.T, data []byte) {
		avg, state, err := DecodeUpdate(data)
		if err != nil {
			return
		}
		up := EncodeUpdate(0, "", avg, state)
		if len(up.Data) > ckptHeaderSize+4*len(avg)+5+len(state) {
			t.Fatalf("%d values packed into %d bytes", len(avg), len(up.Data))
		}
		again, state2, err := DecodeUpdate(up.Data)
		if err != nil || len(again) != len(avg) || string(state2) != string(state) {
			t.Fatalf("re-encoded: %v", err)
		}
		for i := range avg {
			if math.Float32bits(again[i]) != math.Float32bits(avg[i]) {
				t.Fatalf("value %d changed", i)
			}
		}
	})
}
