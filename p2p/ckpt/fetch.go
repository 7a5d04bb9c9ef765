package ckpt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/intellect-node/intellect-node/p2p"
	"log/slog"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ErrNoDonors is returned (wrapped, with the reasons) when no donor can
// supply the wanted checkpoint: none has it, all are busy or unreachable, or
// every one that had it failed or served bad data.
var ErrNoDonors = errors.New("p2p: no donor could supply the checkpoint")

// ErrMovedOn is wrapped (with ErrNoDonors) when every donor that answered
// already holds a later step: ask again for the newest one, at once.
var ErrMovedOn = errors.New("the donors moved on to a later step")

// ErrBadSpec is returned when the wanted step and hash are unusable.
var ErrBadSpec = errors.New("p2p: bad checkpoint spec")

// FetchSpec names the checkpoint a joiner wants: the outer step and the
// model hash the mesh gossips for it (hex SHA-256 of θ₀, as Snapshot.Hash).
type FetchSpec struct {
	Step uint64
	Hash string
	// Run is the run manifest's id; donors of another run refuse to serve.
	Run [32]byte
}

// FetchConfig configures Fetch. The zero value is usable:
// Validate fills in defaults.
type FetchConfig struct {
	// ManifestTimeout bounds opening a stream to a donor and receiving its
	// manifest. 0 means 10 s.
	ManifestTimeout time.Duration
	// ChunkTimeout bounds the wait for each chunk answer (and each request
	// write). A donor that exceeds it is dropped and its chunks are fetched
	// from other donors. 0 means 30 s.
	ChunkTimeout time.Duration
	// Pipeline is the number of chunk requests in flight per donor: with
	// 1 MiB chunks, 8 fill a 100 ms round trip at 80 MiB/s. 0 means 8.
	Pipeline int
	// DisableEndgame stops idle donors from also requesting chunks that are
	// slow to arrive from another donor. That saves the duplicate bytes at
	// the end of a download, but a stalled donor then costs ChunkTimeout.
	DisableEndgame bool
	// MaxBytes is the largest snapshot accepted, checked before allocating.
	// 0 means 64 GiB.
	MaxBytes int64
	// Update fetches a step update on UpdateProtocolID: want names the step
	// it updates and the hash of the model it makes, and the container's θ₀
	// region (Δ̄) is not checked against that hash — the caller applies the
	// update and checks the model it made.
	Update bool
	// BusyRetries is how many more manifest rounds are tried when the donors
	// that have the checkpoint are all busy. 0 means 5; negative means none.
	BusyRetries int
	// BusyBackoff is the wait before the first retry, doubled each time.
	// 0 means 250 ms.
	BusyBackoff time.Duration
	// Logger receives the joiner's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills in defaults and rejects impossible values.
func (c *FetchConfig) Validate() error {
	if c.ManifestTimeout < 0 || c.ChunkTimeout < 0 || c.Pipeline < 0 || c.MaxBytes < 0 || c.BusyBackoff < 0 {
		return errors.New("p2p: ckpt fetch timeouts, pipeline and max bytes must not be negative")
	}
	c.ManifestTimeout = cmpOr(c.ManifestTimeout, 10*time.Second)
	c.ChunkTimeout = cmpOr(c.ChunkTimeout, 30*time.Second)
	c.Pipeline = cmpOr(c.Pipeline, 8)
	c.MaxBytes = cmpOr(c.MaxBytes, 64<<30)
	c.BusyBackoff = cmpOr(c.BusyBackoff, 250*time.Millisecond)
	if c.BusyRetries == 0 {
		c.BusyRetries = 5
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// cmpOr returns v, or def when v is zero.
func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Progress is the state of a download, passed to the progress callback.
type Progress struct {
	Step          uint64
	BytesDone     int64 // verified bytes received
	BytesTotal    int64 // size of the snapshot
	ChunksDone    int
	ChunksTotal   int
	Donors        int // donors agreeing with the wanted step and hash, still in use
	ChunksRetried int // chunks requested again after their donor failed, stalled or lied
	// ChunksDuplicated counts endgame requests: a chunk slow to arrive from
	// one donor requested from another as well (the first good copy wins).
	ChunksDuplicated int
	BadDonors        int // donors caught serving bad data so far
	// ByDonor counts verified chunks received from each donor (a copy).
	ByDonor map[peer.ID]int
}

// Fetch downloads the snapshot of want.Step whose θ₀ hashes to
// want.Hash from several donors in parallel and returns its Data (decode it
// with DecodeSnapshot). It asks every donor for a manifest, uses the donors
// that have the wanted step and hash (the largest group of agreeing
// manifests), spreads chunks over them, verifies every chunk against the
// manifest, retries a bad, failed or slow chunk from another donor and, at
// the end, checks θ₀ against want.Hash. bad lists the donors caught serving
// bad data or violating the protocol; it is returned with errors, too.
//
// progress, if not nil, is called after the manifests are in and after every
// verified chunk; calls never overlap, come from the fetch's goroutines and
// must return quickly.
func Fetch(ctx context.Context, h host.Host, donors []peer.ID, want FetchSpec, cfg FetchConfig, progress func(Progress)) (data []byte, bad []peer.ID, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	hash, err := ckptParseHash(want.Hash)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	f := &ckptFetcher{h: h, want: want, hash: hash, cfg: cfg, progress: progress,
		log: cfg.Logger.With("system", "ckpt", "step", want.Step), excluded: map[peer.ID]bool{}}
	return f.run(ctx, ckptDedupe(donors))
}

// ckptDedupe returns ids without repeats, in their first order.
func ckptDedupe(ids []peer.ID) []peer.ID {
	seen := make(map[peer.ID]bool, len(ids))
	var out []peer.ID
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// ckptFetcher holds the state of one Fetch call across attempts.
type ckptFetcher struct {
	h        host.Host
	want     FetchSpec
	hash     [32]byte
	cfg      FetchConfig
	progress func(Progress)
	log      *slog.Logger
	excluded map[peer.ID]bool // bad, failed or stalled donors
	bad      []peer.ID
	reasons  []string
	newer    int // donors that answered with a later step than wanted
}

// run tries manifest rounds and transfers until one verifies or no usable
// donor is left. Every failed transfer excludes the donors it used, so the
// loop ends.
func (f *ckptFetcher) run(ctx context.Context, donors []peer.ID) ([]byte, []peer.ID, error) {
	backoff, busyLeft := f.cfg.BusyBackoff, max(f.cfg.BusyRetries, 0)
	for {
		var cands []peer.ID
		for _, d := range donors {
			if !f.excluded[d] {
				cands = append(cands, d)
			}
		}
		if len(cands) == 0 {
			return nil, f.bad, f.noDonors()
		}
		group, busy := f.askManifests(ctx, cands)
		if err := ctx.Err(); err != nil {
			for _, o := range group {
				o.s.Reset()
			}
			return nil, f.bad, err
		}
		if len(group) == 0 {
			if busy == 0 || busyLeft == 0 {
				if busy > 0 {
					f.reasons = append(f.reasons, fmt.Sprintf("%d donors busy", busy))
				}
				return nil, f.bad, f.noDonors()
			}
			busyLeft--
			if err := ckptSleep(ctx, backoff); err != nil {
				return nil, f.bad, err
			}
			backoff *= 2
			continue
		}
		data, err := f.transfer(ctx, group)
		if err == nil {
			return data, f.bad, nil
		}
		if ctx.Err() != nil {
			return nil, f.bad, ctx.Err()
		}
		f.reasons = append(f.reasons, err.Error())
	}
}

// noDonors builds the final error with the reasons collected.
func (f *ckptFetcher) noDonors() error {
	if f.newer > 0 && f.newer == len(f.reasons) {
		return fmt.Errorf("%w: %w: step %d hash %.12s: %s", ErrNoDonors, ErrMovedOn, f.want.Step, f.want.Hash, strings.Join(f.reasons, "; "))
	}
	if len(f.reasons) == 0 {
		return fmt.Errorf("%w: step %d hash %.12s", ErrNoDonors, f.want.Step, f.want.Hash)
	}
	return fmt.Errorf("%w: step %d hash %.12s: %s", ErrNoDonors, f.want.Step, f.want.Hash, strings.Join(f.reasons, "; "))
}

// markBad records a donor caught serving bad data or violating the protocol.
func (f *ckptFetcher) markBad(p peer.ID, why string) {
	if containsPeer(f.bad, p) {
		return
	}
	f.excluded[p] = true
	f.bad = append(f.bad, p)
	f.reasons = append(f.reasons, fmt.Sprintf("%s: %s", p, why))
	f.log.Warn("checkpoint donor served bad data", "peer", p, "why", why)
}

// containsPeer reports whether ids holds p.
func containsPeer(ids []peer.ID, p peer.ID) bool {
	for _, id := range ids {
		if id == p {
			return true
		}
	}
	return false
}

// ckptSleep waits d or until ctx ends.
func ckptSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ckptOffer is one donor's answer to a manifest request, with the stream
// kept open for chunk requests when the manifest agrees.
type ckptOffer struct {
	peer peer.ID
	s    network.Stream
	man  *ckptManifest
	busy bool
	bad  bool // protocol violation
	err  error
}

// askManifests asks every candidate for its manifest in parallel and returns
// the offers of the largest group of donors agreeing on the wanted step and
// hash (their streams open; ties go to the group complete first in cands
// order), and how many donors answered busy. Streams of all other donors are
// closed. Donors without the wanted step, failed or bad ones are excluded
// from later rounds; busy ones and those of a losing group are not.
func (f *ckptFetcher) askManifests(ctx context.Context, cands []peer.ID) (group []*ckptOffer, busy int) {
	offers := make([]*ckptOffer, len(cands))
	done := make(chan struct{}, len(cands))
	for i, p := range cands {
		go func() {
			offers[i] = f.askManifest(ctx, p)
			done <- struct{}{}
		}()
	}
	for range cands {
		<-done
	}
	groups := map[string][]*ckptOffer{}
	var best string
	for _, o := range offers {
		switch {
		case o.busy:
			busy++
		case o.bad:
			f.markBad(o.peer, o.err.Error())
		case o.err != nil:
			f.excluded[o.peer] = true
			f.reasons = append(f.reasons, fmt.Sprintf("%s: %v", o.peer, o.err))
		case o.man.status == ckptStatusOtherRun:
			f.excluded[o.peer] = true
			f.reasons = append(f.reasons, fmt.Sprintf("%s: belongs to another run", o.peer))
		case o.man.status != ckptStatusOK:
			f.excluded[o.peer] = true
			f.reasons = append(f.reasons, fmt.Sprintf("%s: has step %d hash %x", o.peer, o.man.step, o.man.modelHash[:6]))
			if o.man.step > f.want.Step {
				f.newer++
			}
		default:
			k := o.man.key()
			groups[k] = append(groups[k], o)
			if best == "" || len(groups[k]) > len(groups[best]) {
				best = k
			}
		}
	}
	for k, g := range groups {
		if k == best {
			continue
		}
		for _, o := range g {
			f.log.Warn("checkpoint donor disagrees with the other donors' manifest", "peer", o.peer)
			o.s.Close()
		}
	}
	return groups[best], busy
}

// askManifest opens a stream to p and exchanges the manifest request.
func (f *ckptFetcher) askManifest(ctx context.Context, p peer.ID) *ckptOffer {
	o := &ckptOffer{peer: p}
	mctx, cancel := context.WithTimeout(ctx, f.cfg.ManifestTimeout)
	defer cancel()
	proto := protocolOf(f.cfg.Update)
	s, err := f.h.NewStream(mctx, p, proto)
	if err != nil {
		o.err = fmt.Errorf("open %s: %w", proto, err)
		return o
	}
	stop := context.AfterFunc(mctx, func() { s.Reset() })
	defer stop()
	s.SetDeadline(time.Now().Add(f.cfg.ManifestTimeout))
	if err := p2p.WriteFrame(s, ckptMsgManifestReq, ckptEncodeManifestReq(f.want.Step, f.hash, f.want.Run)); err != nil {
		return o.fail(s, fmt.Errorf("send manifest request: %w", err), false)
	}
	typ, payload, err := p2p.ReadFrame(s, f.maxManifest(), nil)
	if err != nil {
		return o.fail(s, fmt.Errorf("read manifest: %w", err), errors.Is(err, p2p.ErrFrameTooLarge))
	}
	if err := f.readOffer(o, typ, payload); err != nil {
		return o.fail(s, err, !o.busy && errors.Is(err, ErrProtocol))
	}
	if o.man.status != ckptStatusOK {
		s.Close()
		return o
	}
	s.SetDeadline(time.Time{})
	o.s = s
	return o
}

// readOffer interprets a donor's answer to the manifest request: a manifest
// (checked against the request and MaxBytes) or an error frame (busy or not).
func (f *ckptFetcher) readOffer(o *ckptOffer, typ uint8, payload []byte) error {
	switch typ {
	case ckptMsgManifest:
		m, err := ckptDecodeManifest(payload)
		switch {
		case err != nil:
			return err
		case m.status == ckptStatusOK && (m.step != f.want.Step || m.modelHash != f.hash):
			return fmt.Errorf("%w: manifest for step %d answers a request for step %d", ErrProtocol, m.step, f.want.Step)
		case m.total > f.cfg.MaxBytes:
			return fmt.Errorf("snapshot of %d bytes exceeds the limit of %d", m.total, f.cfg.MaxBytes)
		}
		o.man = m
		return nil
	case ckptMsgError:
		code, text, err := ckptDecodeError(payload)
		if err != nil {
			return err
		}
		o.busy = code == ckptErrBusy
		return fmt.Errorf("donor error %d: %s", code, text)
	default:
		return fmt.Errorf("%w: message type %d instead of a manifest", ErrProtocol, typ)
	}
}

// fail records err, resets s and returns o.
func (o *ckptOffer) fail(s network.Stream, err error, bad bool) *ckptOffer {
	s.Reset()
	o.err, o.bad = err, bad
	return o
}

// maxManifest is the largest manifest frame worth reading for MaxBytes.
func (f *ckptFetcher) maxManifest() int {
	n := (f.cfg.MaxBytes + MinChunkSize - 1) / MinChunkSize
	return int(min(int64(ckptMaxManifest), ckptManifestFixed+32*n))
}

// transfer fetches the chunks of the group's manifest from its donors and
// verifies the result. On failure every donor of the group is excluded from
// later attempts (and marked bad where it was caught lying).
func (f *ckptFetcher) transfer(ctx context.Context, group []*ckptOffer) ([]byte, error) {
	t := newCkptTransfer(group[0].man, f, len(group))
	sums := make(chan ckptThetaSum, 1)
	go t.hashTheta(sums)
	wctx, cancel := context.WithCancel(ctx)
	for _, o := range group {
		f.excluded[o.peer] = true // only this attempt uses it
		go t.work(wctx, o)
	}
	stop := context.AfterFunc(ctx, t.abort)
	defer stop()
	err := t.wait()
	cancel() // resets the streams of donors still answering (endgame losers, stragglers)
	t.waitWorkers()
	theta := <-sums
	for _, b := range t.badDonors() {
		f.markBad(b.peer, b.why)
	}
	if err != nil {
		return nil, err
	}
	if err := f.verify(t.data, theta); err != nil {
		for _, o := range group {
			f.markBad(o.peer, err.Error())
		}
		return nil, err
	}
	f.log.Info("checkpoint fetched", "bytes", len(t.data), "donors", len(group), "retried", t.retried, "duplicated", t.dups)
	return t.data, nil
}

// verify checks the assembled container: its header, its step and θ₀'s
// SHA-256 (computed during the download) against the wanted model hash.
func (f *ckptFetcher) verify(data []byte, theta ckptThetaSum) error {
	if theta.err != nil {
		return theta.err
	}
	l, err := ckptParseHeader(data)
	if err != nil {
		return err
	}
	if l.update != f.cfg.Update {
		return fmt.Errorf("%w: magic %q on the %s protocol", ErrSnapshot, data[:4], protocolOf(f.cfg.Update))
	}
	if st := binary.LittleEndian.Uint64(data[8:]); st != f.want.Step {
		return fmt.Errorf("%w: container holds step %d, want %d", ErrSnapshot, st, f.want.Step)
	}
	if theta.sum != f.hash && !f.cfg.Update {
		return fmt.Errorf("%w: θ₀ does not hash to %.12s", ErrSnapshot, f.want.Hash)
	}
	return nil
}
