package scatter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p"
)

// TestAuditOverLibp2p: after an attempt with Audit, every member asks every
// other owner for a chunk of its segment; the inputs it gets recompute to
// the result it received, and its own input is the one it sent. An
// unknown attempt or segment is refused with a reason; a garbage request
// is reset.
func TestAuditOverLibp2p(t *testing.T) {
	const k, n = 3, 5000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hs, svcs, ids := mesh(t, k, Config{})
	in := vecs(5, k, n)
	w := []float32{5, 5, 5}
	cfg := collective.ScatterConfig{Shards: 2, ChunkElems: 700, Audit: true, Robust: collective.RobustConfig{MaxWeight: 5}}
	res := make([]collective.ScatterResult, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			spec := Spec{ID: "audited", Step: 1, Members: ids, Self: i}
			res[i], _, errs[i] = AllReduce(ctx, svcs[i], spec, w, collective.Buffers{Src: in[i], Dst: make([]float32, n)}, cfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		if i != 1 {
			svcs[i].Keep("audited", res[i].Owned)
		}
	}
	// Member 1 keeps its reports late: audits of it wait for them.
	late := time.AfterFunc(300*time.Millisecond, func() { svcs[1].Keep("audited", res[1].Owned) })
	defer late.Stop()
	for a := range k {
		for owner := range k {
			if owner == a {
				continue
			}
			for shard := range cfg.Shards {
				idx := shard*k + owner
				c := len(res[a].GotChunks[idx]) - 1
				msgs, err := svcs[a].Audit(ctx, ids[owner], "audited", shard, owner, c, k)
				if err != nil {
					t.Fatalf("auditor %d of owner %d: %v", a, owner, err)
				}
				out, _, err := collective.AuditChunk(cfg, w, owner, c, msgs)
				if err != nil {
					t.Fatal(err)
				}
				if sha256.Sum256(out) != res[a].GotChunks[idx][c] || sha256.Sum256(msgs[a]) != res[a].SentChunks[idx][c] {
					t.Fatalf("auditor %d: owner %d's chunk %d does not check out", a, owner, c)
				}
			}
		}
	}
	for _, c := range []struct {
		id           string
		segment, chk int
		want         string
	}{{"other", 1, 0, "attempt not kept"}, {"audited", 2, 0, "not the owner"}, {"audited", 1, 99, "no such chunk"}} {
		_, err := svcs[0].Audit(ctx, ids[1], c.id, 0, c.segment, c.chk, k)
		if !errors.Is(err, ErrAuditRefused) || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	s, err := hs[0].NewStream(ctx, ids[1], AuditProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	_ = p2p.WriteFrame(s, msgAuditRequest, []byte("garbage"))
	if _, _, err := p2p.ReadFrame(s, 1<<20, nil); err == nil {
		t.Error("a garbage audit request was answered")
	}
	s.Reset()
}

func FuzzDecodeAudit(f *testing.F) {
	f.Add(auditRequest{run: [32]byte{1}, shard: 1, segment: 2, chunk: 3, id: "ring"}.encode(), 3)
	f.Add(encodeAuditInputs([][]byte{{1, 2}, {}, {3}}), 3)
	f.Fuzz(func(t *testing.T, p []byte, k int) {
		if r, err := decodeAuditRequest(p); err == nil {
			if again, err := decodeAuditRequest(r.encode()); err != nil || again != r {
				t.Fatalf("round trip %+v: %+v %v", r, again, err)
			}
		}
		k = max(1, k%MaxMembers+1)
		if msgs, err := decodeAuditInputs(p, k); err == nil {
			if len(msgs) != k || !bytes.Equal(encodeAuditInputs(msgs), p) {
				t.Fatalf("%d messages re-encode to other bytes", len(msgs))
			}
		}
	})
}

// TestAuditWaitEndsOnClose: an audit of an attempt the owner finished but
// has not kept yet waits for Keep (keepWait, 10 s) — unless the service
// closes: a node that stops leaves no audit handler waiting behind it.
func TestAuditWaitEndsOnClose(t *testing.T) {
	_, svcs, _ := mesh(t, 1, Config{})
	svc := svcs[0]
	svc.mu.Lock()
	svc.done["finished"] = true
	svc.mu.Unlock()
	got := make(chan string, 1)
	start := time.Now()
	go func() {
		_, why := svc.waitInputs(auditRequest{id: "finished"})
		got <- why
	}()
	for waiting := false; !waiting; { // the wait has made its wake channel
		svc.mu.Lock()
		waiting = svc.keptWake != nil
		svc.mu.Unlock()
		runtime.Gosched()
	}
	select {
	case why := <-got:
		t.Fatalf("the wait for Keep ended before it: %q", why)
	default:
	}
	svc.Close()
	select {
	case why := <-got:
		if why != whyNotKept || time.Since(start) > 2*time.Second {
			t.Fatalf("after Close: %q in %v", why, time.Since(start))
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the audit still waits after Close")
	}
}
