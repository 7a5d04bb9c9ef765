package ckpt

import (
	"context"
	"errors"
	"fmt"
	"github.com/intellect-node/intellect-node/p2p"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
)

// Defaults of ServeConfig.
const (
	// DefaultServeRate is a donor's default cap on chunk bytes sent per
	// second, summed over its transfers: 32 MiB/s, the highest rate at which
	// a donor's compute stayed ≥ 0.95× its idle rate on a shared 2-core
	// machine (BenchmarkCkptDonorCompute, docs/ckpt-transfer.md).
	DefaultServeRate = 32 << 20
	// DefaultMaxTransfers is the default number of streams a donor
	// serves at once.
	DefaultMaxTransfers = 4
	// ckptWritePiece is the most bytes written, and paid for in the token
	// bucket, at once.
	ckptWritePiece = 64 << 10
)

// ServeConfig configures a checkpoint donor. The zero value is usable:
// Validate fills in defaults.
type ServeConfig struct {
	// Rate caps the bytes per second of chunk data sent, summed over all
	// transfers (a token bucket). 0 means DefaultServeRate; a negative
	// value means unlimited.
	Rate int64
	// Burst is the token bucket's depth in bytes. 0 means Rate/8, at least
	// 256 KiB; it must be at least 64 KiB.
	Burst int64
	// MaxTransfers is the number of streams served at once; a joiner beyond
	// it is told the donor is busy. 0 means DefaultMaxTransfers.
	MaxTransfers int
	// IdleTimeout is how long a stream may wait for its next request.
	// 0 means 30 s.
	IdleTimeout time.Duration
	// WriteTimeout is the deadline of each write of at most 64 KiB, not
	// counting time waited for the rate limit. 0 means 30 s.
	WriteTimeout time.Duration
	// Run is the run manifest's id: requests naming another run get
	// nothing. Zero in tests.
	Run [32]byte
	// Update serves step updates on UpdateProtocolID instead of snapshots
	// on ProtocolID: the getter returns an update container whose Hash is
	// the hash of the model the update makes.
	Update bool
	// Logger receives the donor's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills in defaults and rejects impossible values.
func (c *ServeConfig) Validate() error {
	if c.Rate == 0 {
		c.Rate = DefaultServeRate
	}
	if c.Burst == 0 {
		c.Burst = max(c.Rate/8, 256<<10)
	}
	if c.Rate > 0 && c.Burst < ckptWritePiece {
		return fmt.Errorf("p2p: ckpt burst %d bytes is below %d", c.Burst, ckptWritePiece)
	}
	if c.MaxTransfers == 0 {
		c.MaxTransfers = DefaultMaxTransfers
	}
	if c.MaxTransfers < 0 || c.IdleTimeout < 0 || c.WriteTimeout < 0 {
		return errors.New("p2p: ckpt max transfers and timeouts must not be negative")
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// ServerStats counts what a donor has served.
type ServerStats struct {
	Transfers    int64 // streams accepted
	Refused      int64 // streams turned away as busy
	ChunksServed int64 // chunks sent
	BytesServed  int64 // chunk bytes sent
}

// Server is a checkpoint donor: it answers ProtocolID streams with
// the snapshot its get function returns, from memory, while the node keeps
// training. Create it with Serve; stop it with Close.
type Server struct {
	h      host.Host
	get    func() *Snapshot
	cfg    ServeConfig
	log    *slog.Logger
	bucket *p2p.Limiter // nil when unlimited
	slots  chan struct{}
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	latest  *ckptServed
	streams map[network.Stream]struct{}
	closed  bool
	yields  int // Yield(true) calls not yet undone
	wg      sync.WaitGroup

	transfers, refused, chunks, bytes atomic.Int64
}

// ckptServed is a snapshot with its manifest, computed once on first demand.
type ckptServed struct {
	snap *Snapshot
	once sync.Once
	man  *ckptManifest
	enc  []byte // man encoded as a ckptMsgManifest payload
	err  error
}

// Serve registers the checkpoint protocol on h. get returns the
// snapshot of the current outer step, or nil before there is one; it is
// called once per manifest request, concurrently from stream handlers, and
// must not block. Snapshots must never be modified once returned.
func Serve(h host.Host, get func() *Snapshot, cfg ServeConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cs := &Server{
		h: h, get: get, cfg: cfg,
		log:     cfg.Logger.With("system", "ckpt"),
		slots:   make(chan struct{}, cfg.MaxTransfers),
		streams: make(map[network.Stream]struct{}),
	}
	if cfg.Rate > 0 {
		cs.bucket = p2p.NewLimiter(cfg.Rate, cfg.Burst)
	}
	cs.ctx, cs.cancel = context.WithCancel(context.Background())
	h.SetStreamHandler(protocolOf(cfg.Update), cs.handle)
	return cs, nil
}

// yieldDivisor is how much a donor slows its serving while the node is
// reducing (Yield), so that a joiner's download does not starve the
// all-reduce on the donor's uplink.
const yieldDivisor = 16

// Yield slows serving to 1/yieldDivisor of the configured rate while on
// (an all-reduce in flight), and restores it when off. Calls nest: serving
// speeds up again at the last off. Without a rate cap it does nothing.
func (cs *Server) Yield(on bool) {
	if cs.bucket == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if on {
		cs.yields++
	} else if cs.yields > 0 {
		cs.yields--
	}
	rate := float64(cs.cfg.Rate)
	if cs.yields > 0 {
		rate /= yieldDivisor
	}
	cs.bucket.SetRate(rate)
}

// Stats returns the counters of what this donor has served so far.
func (cs *Server) Stats() ServerStats {
	return ServerStats{
		Transfers: cs.transfers.Load(), Refused: cs.refused.Load(),
		ChunksServed: cs.chunks.Load(), BytesServed: cs.bytes.Load(),
	}
}

// Prepare hashes the chunks of the current snapshot now, on the caller's
// goroutine, instead of on the first joiner's request: about 1 s per GiB of
// one core here, which a joiner's ManifestTimeout must otherwise cover. It is
// optional; without a snapshot it does nothing.
func (cs *Server) Prepare() error {
	if sv := cs.current(); sv != nil {
		return sv.err
	}
	return nil
}

// Close unregisters the protocol, resets the streams being served and waits
// for their handlers to return.
func (cs *Server) Close() error {
	cs.h.RemoveStreamHandler(protocolOf(cs.cfg.Update))
	cs.mu.Lock()
	cs.closed = true
	for s := range cs.streams {
		s.Reset()
	}
	cs.mu.Unlock()
	cs.cancel()
	cs.wg.Wait()
	return nil
}

// handle serves one stream.
func (cs *Server) handle(s network.Stream) {
	if !cs.track(s) {
		s.Reset()
		return
	}
	defer cs.untrack(s)
	select {
	case cs.slots <- struct{}{}:
		defer func() { <-cs.slots }()
	default:
		cs.refused.Add(1)
		cs.refuse(s)
		return
	}
	cs.transfers.Add(1)
	err := cs.serve(s)
	switch {
	case err == nil:
		s.Close()
	case cs.ctx.Err() != nil:
		s.Reset()
	default:
		cs.log.Debug("checkpoint stream ended", "peer", s.Conn().RemotePeer(), "err", err)
		s.Reset()
	}
}

// track registers s so that Close can reset it; false once closed.
func (cs *Server) track(s network.Stream) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return false
	}
	cs.streams[s] = struct{}{}
	cs.wg.Add(1)
	return true
}

// untrack forgets s.
func (cs *Server) untrack(s network.Stream) {
	cs.mu.Lock()
	delete(cs.streams, s)
	cs.mu.Unlock()
	cs.wg.Done()
}

// refuse tells a joiner that all transfer slots are taken.
func (cs *Server) refuse(s network.Stream) {
	s.SetWriteDeadline(time.Now().Add(cs.cfg.WriteTimeout))
	if err := p2p.WriteFrame(s, ckptMsgError, ckptEncodeError(ckptErrBusy, "busy")); err != nil {
		s.Reset()
		return
	}
	s.Close()
}

// serve answers requests until the joiner closes its side (nil) or an error.
func (cs *Server) serve(s network.Stream) error {
	var pinned *ckptServed
	buf := make([]byte, ckptMaxRequest)
	for {
		s.SetReadDeadline(time.Now().Add(cs.cfg.IdleTimeout))
		typ, p, err := p2p.ReadFrame(s, ckptMaxRequest, buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch typ {
		case ckptMsgManifestReq:
			pinned, err = cs.answerManifest(s, p)
		case ckptMsgChunkReq:
			err = cs.sendChunk(s, pinned, p)
		default:
			err = fmt.Errorf("%w: message type %d from joiner", ErrProtocol, typ)
		}
		if err != nil {
			return err
		}
	}
}

// answerManifest sends the manifest of the current snapshot and returns it
// when it matches the wanted step and hash (the stream then pins it).
func (cs *Server) answerManifest(s network.Stream, p []byte) (*ckptServed, error) {
	step, hash, run, err := ckptDecodeManifestReq(p)
	if err != nil {
		return nil, err
	}
	sv := cs.current()
	var payload []byte
	switch {
	case run != cs.cfg.Run:
		cs.log.Debug("manifest request of another run", "peer", s.Conn().RemotePeer(), "run", fmt.Sprintf("%x", run[:6]))
		payload = (&ckptManifest{status: ckptStatusOtherRun}).encode()
		sv = nil
	case sv == nil || sv.err != nil:
		payload = (&ckptManifest{status: ckptStatusNone}).encode()
		sv = nil
	case sv.man.step != step || sv.man.modelHash != hash:
		payload = (&ckptManifest{status: ckptStatusMismatch, step: sv.man.step, modelHash: sv.man.modelHash}).encode()
		sv = nil
	default:
		payload = sv.enc
	}
	s.SetWriteDeadline(time.Now().Add(cs.cfg.WriteTimeout))
	return sv, p2p.WriteFrame(s, ckptMsgManifest, payload)
}

// current returns the latest snapshot with its manifest, hashing it on first
// use; nil when the node has none.
func (cs *Server) current() *ckptServed {
	snap := cs.get()
	if snap == nil {
		return nil
	}
	cs.mu.Lock()
	sv := cs.latest
	if sv == nil || sv.snap != snap {
		sv = &ckptServed{snap: snap}
		cs.latest = sv
	}
	cs.mu.Unlock()
	sv.once.Do(func() {
		sv.man, sv.err = ckptBuildManifest(snap)
		if sv.err != nil {
			cs.log.Error("cannot serve checkpoint snapshot", "step", snap.Step, "err", sv.err)
			return
		}
		sv.enc = sv.man.encode()
	})
	return sv
}

// sendChunk sends one chunk of the pinned snapshot, paced by the bucket.
func (cs *Server) sendChunk(s network.Stream, sv *ckptServed, p []byte) error {
	i, err := ckptDecodeChunkReq(p)
	if err != nil {
		return err
	}
	if sv == nil {
		return fmt.Errorf("%w: chunk request before an agreeing manifest", ErrProtocol)
	}
	if i >= len(sv.man.chunks) {
		return fmt.Errorf("%w: chunk %d of %d", ErrProtocol, i, len(sv.man.chunks))
	}
	off, end := sv.man.chunkRange(i)
	w := &ckptPacedWriter{s: s, cs: cs}
	if err := p2p.WriteFrame(w, ckptMsgChunk, sv.snap.Data[off:end]); err != nil {
		return err
	}
	cs.chunks.Add(1)
	cs.bytes.Add(end - off)
	return nil
}

// ckptPacedWriter writes to a stream in pieces, each paid for in the
// donor's token bucket and written under its own deadline.
type ckptPacedWriter struct {
	s  network.Stream
	cs *Server
}

// Write implements io.Writer.
func (w *ckptPacedWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n := min(len(p)-done, ckptWritePiece)
		if w.cs.bucket != nil {
			if err := w.cs.bucket.Wait(w.cs.ctx, n); err != nil {
				return done, err
			}
		}
		w.s.SetWriteDeadline(time.Now().Add(w.cs.cfg.WriteTimeout))
		m, err := w.s.Write(p[done : done+n])
		done += m
		if err != nil {
			return done, err
		}
	}
	return done, nil
}
