package p2p

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// ckptTransfer spreads the chunks of one manifest over the donors that
// agree on it. Chunks wait in a queue; each donor's worker keeps up to
// Pipeline requests in flight on its stream, verifies each answer and puts
// back what it could not deliver, so other workers fetch it.
type ckptTransfer struct {
	man      *ckptManifest
	cfg      *CkptFetchConfig
	log      *slog.Logger
	progress func(CkptProgress)
	donors   int    // workers started
	data     []byte // the snapshot being assembled; chunk i is written only by the worker holding i

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []int // chunks to request, front first
	doneCount int
	bytesDone int64
	live      int // workers still running
	retried   int
	aborted   bool
	bad       []ckptBadDonor
	failures  []string
	byDonor   map[peer.ID]int
}

// ckptBadDonor is a donor caught serving bad data, with the reason.
type ckptBadDonor struct {
	peer peer.ID
	why  string
}

// newCkptTransfer allocates the snapshot buffer (the manifest's total was
// checked against MaxBytes) and queues every chunk.
func newCkptTransfer(man *ckptManifest, f *ckptFetcher, donors int) *ckptTransfer {
	t := &ckptTransfer{man: man, cfg: &f.cfg, log: f.log, progress: f.progress,
		data: make([]byte, man.total), donors: donors, live: donors, byDonor: map[peer.ID]int{}}
	t.cond = sync.NewCond(&t.mu)
	t.queue = make([]int, len(man.chunks))
	for i := range t.queue {
		t.queue[i] = i
	}
	t.mu.Lock()
	t.report()
	t.mu.Unlock()
	return t
}

// wait blocks until every chunk is verified (nil), or every worker has
// stopped with chunks missing, or the transfer was aborted.
func (t *ckptTransfer) wait() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for !t.complete() && t.live > 0 && !t.aborted {
		t.cond.Wait()
	}
	if t.complete() {
		return nil
	}
	if t.aborted {
		return context.Canceled
	}
	msg := fmt.Sprintf("%d of %d chunks missing after all %d agreeing donors failed", len(t.man.chunks)-t.doneCount, len(t.man.chunks), t.donors)
	if len(t.failures) > 0 {
		msg += ": " + strings.Join(t.failures, "; ")
	}
	return errors.New(msg)
}

// complete reports whether every chunk is in; t.mu is held.
func (t *ckptTransfer) complete() bool { return t.doneCount == len(t.man.chunks) }

// abort stops the transfer (the context ended; workers' streams are reset).
func (t *ckptTransfer) abort() {
	t.mu.Lock()
	t.aborted = true
	t.cond.Broadcast()
	t.mu.Unlock()
}

// badDonors returns the donors caught lying, once the transfer is over.
func (t *ckptTransfer) badDonors() []ckptBadDonor {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]ckptBadDonor(nil), t.bad...)
}

// next returns the next chunk to request. With block set it waits while
// the queue is empty but chunks are still in flight elsewhere (they may come
// back); ok is false when there is nothing left for this worker.
func (t *ckptTransfer) next(block bool) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if t.aborted || t.complete() {
			return 0, false
		}
		if len(t.queue) > 0 {
			i := t.queue[0]
			t.queue = t.queue[1:]
			return i, true
		}
		if !block {
			return 0, false
		}
		t.cond.Wait()
	}
}

// accept stores a verified chunk received from p.
func (t *ckptTransfer) accept(i int, chunk []byte, p peer.ID) {
	off, _ := t.man.chunkRange(i)
	copy(t.data[off:], chunk)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.doneCount++
	t.bytesDone += int64(len(chunk))
	t.byDonor[p]++
	t.report()
	if t.complete() {
		t.cond.Broadcast()
	}
}

// exit ends a worker: chunks it held go back to the front of the queue.
func (t *ckptTransfer) exit(p peer.ID, held []int, err error, bad bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live--
	if len(held) > 0 && !t.aborted {
		t.queue = append(append([]int(nil), held...), t.queue...)
		t.retried += len(held)
	}
	switch {
	case bad:
		t.bad = append(t.bad, ckptBadDonor{p, err.Error()})
	case err != nil:
		t.failures = append(t.failures, fmt.Sprintf("%s: %v", p, err))
		t.log.Info("checkpoint donor dropped", "peer", p, "err", err, "chunks_back", len(held))
	}
	t.report()
	t.cond.Broadcast()
}

// report calls the progress callback; t.mu is held, so calls never overlap.
func (t *ckptTransfer) report() {
	if t.progress == nil {
		return
	}
	by := make(map[peer.ID]int, len(t.byDonor))
	for p, n := range t.byDonor {
		by[p] = n
	}
	t.progress(CkptProgress{
		Step: t.man.step, BytesDone: t.bytesDone, BytesTotal: t.man.total,
		ChunksDone: t.doneCount, ChunksTotal: len(t.man.chunks), Donors: t.live,
		ChunksRetried: t.retried, BadDonors: len(t.bad), ByDonor: by,
	})
}

// work fetches chunks from one donor until none are left or it fails.
func (t *ckptTransfer) work(ctx context.Context, o *ckptOffer) {
	s := o.s
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	held, err, bad := t.pump(o)
	if ctx.Err() != nil {
		err, bad = nil, false // cancelled, not the donor's fault
	}
	if err != nil {
		s.Reset()
	} else {
		s.Close()
	}
	t.exit(o.peer, held, err, bad)
}

// pump runs the request pipeline on o's stream. It returns the chunks still
// held (requested, not delivered), the error that stopped it and whether
// that error proves the donor bad.
func (t *ckptTransfer) pump(o *ckptOffer) (held []int, err error, bad bool) {
	s := o.s
	buf := make([]byte, t.man.chunkSize)
	for {
		for len(held) < t.cfg.Pipeline {
			i, ok := t.next(len(held) == 0)
			if !ok {
				break
			}
			held = append(held, i)
			s.SetWriteDeadline(time.Now().Add(t.cfg.ChunkTimeout))
			if err := WriteFrame(s, ckptMsgChunkReq, ckptEncodeChunkReq(i)); err != nil {
				return held, fmt.Errorf("request chunk %d: %w", i, err), false
			}
		}
		if len(held) == 0 {
			return nil, nil, false
		}
		s.SetReadDeadline(time.Now().Add(t.cfg.ChunkTimeout))
		typ, p, err := ReadFrame(s, t.man.chunkSize, buf)
		if err != nil {
			return held, fmt.Errorf("read chunk %d: %w", held[0], err), false
		}
		if err := t.check(held[0], typ, p); err != nil {
			return held, err, true
		}
		t.accept(held[0], p, o.peer)
		held = held[1:]
	}
}

// check verifies an answer to a request for chunk i against the manifest.
func (t *ckptTransfer) check(i int, typ uint8, p []byte) error {
	if typ != ckptMsgChunk {
		return fmt.Errorf("%w: message type %d instead of chunk %d", ErrCkptProtocol, typ, i)
	}
	off, end := t.man.chunkRange(i)
	if int64(len(p)) != end-off {
		return fmt.Errorf("%w: chunk %d has %d bytes, want %d", ErrCkptProtocol, i, len(p), end-off)
	}
	if sha256.Sum256(p) != t.man.chunks[i] {
		return fmt.Errorf("chunk %d does not match its manifest hash", i)
	}
	return nil
}
