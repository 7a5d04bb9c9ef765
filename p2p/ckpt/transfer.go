package ckpt

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/intellect-node/intellect-node/p2p"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// ckptTransfer spreads the chunks of one manifest over the donors that
// agree on it. Chunks wait in a queue, front first; each donor's worker
// keeps up to Pipeline requests in flight on its stream, verifies each
// answer and, when it stops, puts back what it could not deliver. A worker
// that finds the queue empty requests a chunk that has been in flight
// elsewhere for more than twice the usual answer time (endgame), so a slow
// donor does not hold up the end; the first verified copy wins.
type ckptTransfer struct {
	man      *ckptManifest
	cfg      *FetchConfig
	log      *slog.Logger
	progress func(Progress)
	donors   int    // workers started
	data     []byte // the snapshot being assembled; written only under mu

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []int   // chunks to request, front first
	holders   []uint8 // workers holding each chunk (requested, not answered)
	done      []bool  // verified chunks; a done chunk is never written again
	doneCount int
	prefix    int // chunks 0..prefix-1 are done
	bytesDone int64
	live      int // workers still running
	retried   int
	dups      int
	reqAt     []time.Time   // when each chunk was last taken from the queue
	lat       time.Duration // moving average of request-to-answer time
	wakeup    bool          // an endgame timer is pending
	aborted   bool
	bad       []ckptBadDonor
	failures  []string
	byDonor   map[peer.ID]int
	kick      chan struct{} // wakes the θ₀ hasher; capacity 1
}

// ckptBadDonor is a donor caught serving bad data, with the reason.
type ckptBadDonor struct {
	peer peer.ID
	why  string
}

// newCkptTransfer allocates the snapshot buffer (the manifest's total was
// checked against MaxBytes) and queues every chunk.
func newCkptTransfer(man *ckptManifest, f *ckptFetcher, donors int) *ckptTransfer {
	n := len(man.chunks)
	t := &ckptTransfer{man: man, cfg: &f.cfg, log: f.log, progress: f.progress,
		data: make([]byte, man.total), donors: donors, live: donors, byDonor: map[peer.ID]int{},
		queue: make([]int, n), holders: make([]uint8, n), reqAt: make([]time.Time, n), done: make([]bool, n), kick: make(chan struct{}, 1)}
	t.cond = sync.NewCond(&t.mu)
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
	msg := fmt.Sprintf("%d of %d chunks missing after all %d agreeing donors failed",
		len(t.man.chunks)-t.doneCount, len(t.man.chunks), t.donors)
	if len(t.failures) > 0 {
		msg += ": " + strings.Join(t.failures, "; ")
	}
	return errors.New(msg)
}

// waitWorkers blocks until every worker has returned.
func (t *ckptTransfer) waitWorkers() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.live > 0 {
		t.cond.Wait()
	}
}

// complete reports whether every chunk is in; t.mu is held.
func (t *ckptTransfer) complete() bool { return t.doneCount == len(t.man.chunks) }

// abort stops the transfer (the caller's context ended).
func (t *ckptTransfer) abort() {
	t.mu.Lock()
	t.aborted = true
	t.cond.Broadcast()
	t.kickHasher()
	t.mu.Unlock()
}

// badDonors returns the donors caught lying.
func (t *ckptTransfer) badDonors() []ckptBadDonor {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]ckptBadDonor(nil), t.bad...)
}

// next returns the next chunk to request. An idle worker (block set) that
// finds the queue empty takes a chunk in flight at one other worker, or
// waits for chunks to come back; ok is false when nothing is left for it.
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
			t.holders[i]++
			t.reqAt[i] = time.Now()
			return i, true
		}
		if !block {
			return 0, false
		}
		if t.cfg.DisableEndgame {
			t.cond.Wait()
			continue
		}
		i, wait := t.straggler(time.Now())
		if i >= 0 {
			t.holders[i]++
			t.dups++
			return i, true
		}
		if wait > 0 && !t.wakeup {
			t.wakeup = true
			time.AfterFunc(wait, func() {
				t.mu.Lock()
				t.wakeup = false
				t.cond.Broadcast()
				t.mu.Unlock()
			})
		}
		t.cond.Wait()
	}
}

// ckptMinEndgameAge is the least time a chunk is in flight before an idle
// worker requests it too.
const ckptMinEndgameAge = 20 * time.Millisecond

// straggler returns the lowest chunk in flight at exactly one worker for
// longer than twice the average answer time, or -1 and how long until the
// oldest such chunk qualifies (0 if none is in flight); t.mu is held.
func (t *ckptTransfer) straggler(now time.Time) (int, time.Duration) {
	limit := max(2*t.lat, ckptMinEndgameAge)
	var wait time.Duration
	for i := t.prefix; i < len(t.done); i++ {
		if t.done[i] || t.holders[i] != 1 {
			continue
		}
		age := now.Sub(t.reqAt[i])
		if age >= limit {
			return i, 0
		}
		if w := limit - age; wait == 0 || w < wait {
			wait = w
		}
	}
	return -1, wait
}

// accept stores a verified chunk received from p, unless another copy
// already won.
func (t *ckptTransfer) accept(i int, chunk []byte, p peer.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.holders[i]--
	if t.done[i] {
		return
	}
	off, _ := t.man.chunkRange(i)
	copy(t.data[off:], chunk)
	if l := time.Since(t.reqAt[i]); t.lat == 0 {
		t.lat = l
	} else {
		t.lat += (l - t.lat) / 8
	}
	t.done[i] = true
	t.doneCount++
	t.bytesDone += int64(len(chunk))
	t.byDonor[p]++
	advanced := false
	for t.prefix < len(t.done) && t.done[t.prefix] {
		t.prefix++
		advanced = true
	}
	t.report()
	if advanced {
		t.kickHasher()
	}
	if t.complete() {
		t.cond.Broadcast()
	}
}

// exit ends a worker: chunks it held that nobody else holds go back to the
// front of the queue.
func (t *ckptTransfer) exit(p peer.ID, held []int, err error, bad bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live--
	var back []int
	for _, i := range held {
		t.holders[i]--
		if !t.done[i] && t.holders[i] == 0 {
			back = append(back, i)
		}
	}
	t.queue = append(back, t.queue...)
	t.retried += len(back)
	switch {
	case bad:
		t.bad = append(t.bad, ckptBadDonor{p, err.Error()})
	case err != nil:
		t.failures = append(t.failures, fmt.Sprintf("%s: %v", p, err))
		t.log.Info("checkpoint donor dropped", "peer", p, "err", err, "chunks_back", len(back))
	}
	t.report()
	t.cond.Broadcast()
	t.kickHasher()
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
	t.progress(Progress{
		Step: t.man.step, BytesDone: t.bytesDone, BytesTotal: t.man.total,
		ChunksDone: t.doneCount, ChunksTotal: len(t.man.chunks), Donors: t.live,
		ChunksRetried: t.retried, ChunksDuplicated: t.dups, BadDonors: len(t.bad), ByDonor: by,
	})
}

// work fetches chunks from one donor until none are left, it fails, or ctx
// ends (the transfer is complete or abandoned: not the donor's fault).
func (t *ckptTransfer) work(ctx context.Context, o *ckptOffer) {
	s := o.s
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	held, err, bad := t.pump(o)
	if ctx.Err() != nil {
		err, bad = nil, false
	}
	if err != nil {
		s.Reset()
	} else {
		s.Close()
	}
	t.exit(o.peer, held, err, bad)
}

// pump runs the request pipeline on o's stream. It returns the chunks still
// held (requested, not answered), the error that stopped it and whether
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
			if err := p2p.WriteFrame(s, ckptMsgChunkReq, ckptEncodeChunkReq(i)); err != nil {
				return held, fmt.Errorf("request chunk %d: %w", i, err), false
			}
		}
		if len(held) == 0 {
			return nil, nil, false
		}
		off, end := t.man.chunkRange(held[0])
		s.SetReadDeadline(time.Now().Add(t.cfg.ChunkTimeout))
		typ, p, err := p2p.ReadFrame(s, int(end-off), buf)
		if err != nil {
			return held, fmt.Errorf("read chunk %d: %w", held[0], err), errors.Is(err, p2p.ErrFrameTooLarge)
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
		return fmt.Errorf("%w: message type %d instead of chunk %d", ErrProtocol, typ, i)
	}
	off, end := t.man.chunkRange(i)
	if int64(len(p)) != end-off {
		return fmt.Errorf("%w: chunk %d has %d bytes, want %d", ErrProtocol, i, len(p), end-off)
	}
	if sha256.Sum256(p) != t.man.chunks[i] {
		return fmt.Errorf("chunk %d does not match its manifest hash", i)
	}
	return nil
}

// kickHasher wakes the θ₀ hasher without blocking.
func (t *ckptTransfer) kickHasher() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// prefixBytes is the length of the leading run of verified chunks; t.mu is held.
func (t *ckptTransfer) prefixBytes() int64 {
	if t.prefix == 0 {
		return 0
	}
	_, end := t.man.chunkRange(t.prefix - 1)
	return end
}

// ckptThetaSum is the θ₀ hasher's result.
type ckptThetaSum struct {
	sum [32]byte
	err error
}

// hashTheta hashes θ₀ while the download goes on, following the leading run
// of verified chunks (chunks are requested in order, so it trails the
// download closely and only the last stretch is left when it completes).
// It parses the container header as soon as the first chunk is in.
func (t *ckptTransfer) hashTheta(res chan<- ckptThetaSum) {
	h := sha256.New()
	var l ckptLayout
	pos := int64(-1) // next θ₀ byte to hash; -1 until the header is parsed
	for {
		t.mu.Lock()
		avail, over := t.prefixBytes(), t.aborted || t.live == 0 || t.complete()
		t.mu.Unlock()
		if pos < 0 && avail >= ckptHeaderSize {
			var err error
			if l, err = ckptParseHeader(t.data); err != nil {
				res <- ckptThetaSum{err: err}
				return
			}
			pos = int64(l.thetaOff)
		}
		if pos >= 0 && pos < int64(l.vOff) && avail > pos {
			end := min(avail, int64(l.vOff))
			h.Write(t.data[pos:end])
			pos = end
		}
		if pos >= 0 && pos == int64(l.vOff) {
			var r ckptThetaSum
			h.Sum(r.sum[:0])
			res <- r
			return
		}
		if over && avail < t.man.total {
			res <- ckptThetaSum{err: errors.New("transfer incomplete")}
			return
		}
		<-t.kick
	}
}
