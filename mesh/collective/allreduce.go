package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
)

// Transport connects one ring member to its two neighbours for one
// all-reduce attempt. Shard s (0 ≤ s < AllReduceConfig.Shards) is an
// independent, ordered, reliable channel. Each shard is used by two
// goroutines at once, one sending and one receiving; different shards are
// used concurrently.
type Transport interface {
	// Send delivers msg on shard to the right neighbour (rank+1 mod k). It
	// may block until the neighbour has room; it must not retain msg after it
	// returns, and must return promptly (with ctx.Err() or a transport error)
	// once ctx is done.
	Send(ctx context.Context, shard int, msg []byte) error
	// Recv returns the next message on shard from the left neighbour
	// (rank−1 mod k). The slice is valid until the next Recv on that shard.
	// It must return promptly once ctx is done.
	Recv(ctx context.Context, shard int) ([]byte, error)
}

// Aborter is implemented by transports that can tell the neighbours why this
// member gave up, so that the member at fault is named all around the ring
// (a neighbour then returns a *PeerError with Relayed set). AllReduce calls
// Abort once, with the error it is about to return, before returning.
type Aborter interface {
	Abort(cause error)
}

// PeerError is returned by AllReduce when the attempt failed because of a
// ring member: the neighbour whose stream broke, timed out or sent a
// malformed chunk, or, when Relayed, the member another member named in its
// abort. The node reports Rank to the mesh and retries with the new ring.
type PeerError struct {
	Rank    int   // ring index of the member at fault
	Relayed bool  // learnt from another member's abort, not observed here
	Err     error // what went wrong
}

// Error says which member failed and how it was learnt.
func (e *PeerError) Error() string {
	how := "observed"
	if e.Relayed {
		how = "relayed"
	}
	return fmt.Sprintf("mesh: all-reduce failed at ring member %d (%s): %v", e.Rank, how, e.Err)
}

// Unwrap returns the underlying error.
func (e *PeerError) Unwrap() error { return e.Err }

// ErrInvalidArgument reports a bad AllReduce argument or configuration.
var ErrInvalidArgument = errors.New("mesh: invalid all-reduce argument")

// Defaults and limits of AllReduceConfig.
const (
	// DefaultShards is the shard count the node ships (node.DefaultShards,
	// --shards). It is 4, not the 8 that reached line rate on a long-fat
	// link (one yamux stream is window-bound at ≈ 45 MiB/s with 100 ms RTT,
	// by a measurement once cited as MEASURED.md, a file the repository no
	// longer has): each shard cuts its own slice into chunks with one int8
	// scale each, so the count moves the quantization boundaries and
	// changing it would change every run's model hashes. Ask for 8
	// explicitly where line rate matters.
	DefaultShards = 4
	// MaxShards bounds the streams one attempt opens per neighbour.
	MaxShards = 64
	// DefaultChunkElems is 64 KiB of int8 codes per message.
	DefaultChunkElems = 64 << 10
)

// AllReduceConfig configures AllReduce. Every member of a ring must use the
// same values (they decide the bits of the result).
type AllReduceConfig struct {
	// Shards is the number of independent rings, each over a contiguous
	// slice of the vector and on its own Transport shard. Default
	// DefaultShards; 1..MaxShards.
	Shards int
	// ChunkElems is the number of values per message, the unit of
	// pipelining. Default DefaultChunkElems; 1..MaxChunkElems.
	ChunkElems int
	// Codec is the wire format of the values. Default CodecInt8. With
	// CodecQ4, CodecQ2 and CodecTopK every member encodes its contribution
	// once and the ring gathers the encoded contributions (see
	// AllReduceInto).
	Codec Codec
	// ErrorFeedback, with a non-nil residual, adds the residual (the
	// quantization error this member made in the previous all-reduce) to
	// this member's contribution and stores the new error in it.
	ErrorFeedback bool
	// FeedbackDecay β scales the residual carried in by the compressed
	// codecs' error feedback: the contribution is Src + β·ResIn, in the
	// member's own units (SparseLoCo uses 0.95). Default 1; in (0, 1]; 1
	// for CodecInt8 and CodecFP32, whose residual is in output units.
	FeedbackDecay float32
	// TopK is the entries CodecTopK keeps per full block (a short last
	// block keeps ⌈len·TopK/TopKBlock⌉). Default DefaultTopK (at most
	// TopKBlock); 1..TopKBlock. Cleared by Validate for other codecs, as are
	// TopKBlock and TopKBits.
	TopK int
	// TopKBlock is the values per CodecTopK block; indices take
	// ⌈log2 TopKBlock⌉ bits. Default DefaultTopKBlock; 1..MaxChunkElems, and
	// a chunk of ChunkElems may hold at most a few tens of blocks (a
	// result's block counts must not outweigh a contribution's header).
	TopKBlock int
	// TopKBits is the bits per value CodecTopK keeps: 2 or 4. Default
	// DefaultTopKBits.
	TopKBits int
}

// Validate fills defaults and rejects out-of-range values.
func (c *AllReduceConfig) Validate() error {
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	if c.ChunkElems == 0 {
		c.ChunkElems = DefaultChunkElems
	}
	if c.Codec == 0 {
		c.Codec = CodecInt8
	}
	switch {
	case c.Shards < 1 || c.Shards > MaxShards:
		return fmt.Errorf("%w: Shards %d not in 1..%d", ErrInvalidArgument, c.Shards, MaxShards)
	case c.ChunkElems < 1 || c.ChunkElems > MaxChunkElems:
		return fmt.Errorf("%w: ChunkElems %d not in 1..%d", ErrInvalidArgument, c.ChunkElems, MaxChunkElems)
	case !c.Codec.valid():
		return fmt.Errorf("%w: %v", ErrInvalidArgument, c.Codec)
	}
	return c.validateCodec()
}

// Stats counts the chunk messages (header and payload) of one AllReduce.
type Stats struct {
	BytesSent, BytesRecv int64
	MsgsSent, MsgsRecv   int64
}

func (s *Stats) add(o Stats) {
	s.BytesSent += o.BytesSent
	s.BytesRecv += o.BytesRecv
	s.MsgsSent += o.MsgsSent
	s.MsgsRecv += o.MsgsRecv
}

// AllReduce replaces vec, on every member of a ring of k = len(weights)
// members, with the weighted mean Σ weights[i]·vec_i / Σ weights, where vec_i
// is member i's vec. rank is this member's index in the ring; weights (e.g.
// inner steps done) must be the same on all members, finite, ≥ 0, with a
// positive sum. On success every member holds bit-identical values: each
// segment is quantized once by the member that completed its reduction and
// everybody, that member too, decodes the same bytes.
//
// residual is used only with cfg.ErrorFeedback; it must then be nil or as
// long as vec, zero before the first call, and is carried from one call to
// the next (in place: AllReduceFeedback with resIn = resOut). On error, vec
// and residual hold unspecified values (the caller recomputes vec and may
// zero residual) and the error is a *PeerError naming the member at fault
// when one is known, context.Canceled when ctx was cancelled, or wraps
// ErrInvalidArgument or ErrNonFinite.
func AllReduce(ctx context.Context, tr Transport, rank int, weights []float32, vec, residual []float32, cfg AllReduceConfig) (Stats, error) {
	return AllReduceInto(ctx, tr, rank, weights, Buffers{Dst: vec, ResIn: residual, ResOut: residual}, cfg)
}

// Buffers are the vectors of one AllReduceInto call, all as long as Dst.
type Buffers struct {
	// Src is this member's vector, only read; nil means Dst holds it.
	Src []float32
	// Dst receives the mean.
	Dst []float32
	// ResIn is the error-feedback residual carried in and ResOut where the
	// new one goes (cfg.ErrorFeedback; both nil or both set; they may be
	// the same slice).
	ResIn, ResOut []float32
}

// AllReduceInto is AllReduce over separate buffers. With Src set and two
// distinct residuals a failed attempt leaves Src and ResIn as they were, so
// a caller retries with them and, on success, swaps ResIn and ResOut: no
// model-sized copy or allocation per attempt (the copy of Src into Dst is
// made chunk by chunk inside the pass).
//
// With CodecQ4, CodecQ2 or CodecTopK nothing is reduced on the way: each
// member encodes its contribution Src + β·ResIn once (ResOut = what that
// lost, in the member's own units), the ring forwards every member's
// encoded chunks k−1 hops (allgather.go), and every member sums the k
// decoded contributions in rank order, each scaled by weights[i]/Σ weights,
// into Dst. Each member sends and receives k−1 encoded contributions and
// holds all k.
func AllReduceInto(ctx context.Context, tr Transport, rank int, weights []float32, b Buffers, cfg AllReduceConfig) (Stats, error) {
	if err := cfg.Validate(); err != nil {
		return Stats{}, err
	}
	scale, err := weightScale(weights, rank)
	if err != nil {
		return Stats{}, err
	}
	if err := b.check(cfg); err != nil {
		return Stats{}, err
	}
	vec, resIn, resOut := b.Dst, b.ResIn, b.ResOut
	if !cfg.ErrorFeedback {
		resIn, resOut = nil, nil
	}
	if len(weights) == 1 {
		return Stats{}, reduceAlone(b.Src, vec, resIn, resOut, scale, cfg)
	}
	r := &ring{parent: ctx, tr: tr, rank: rank, k: len(weights), cfg: cfg}
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	shards := make([]shardRunner, cfg.Shards)
	scales := weightScales(weights)
	var wg sync.WaitGroup
	for s := range shards {
		lo, hi := span(len(vec), cfg.Shards, s)
		if cfg.Codec.compressed() {
			shards[s] = newGatherRun(r, s, Buffers{Src: sub(b.Src, lo, hi), Dst: vec[lo:hi], ResIn: sub(resIn, lo, hi),
				ResOut: sub(resOut, lo, hi)}, scales)
		} else {
			shards[s] = newShardRun(r, s, sub(b.Src, lo, hi), vec[lo:hi], sub(resIn, lo, hi), sub(resOut, lo, hi), scale)
		}
		wg.Go(shards[s].run)
	}
	wg.Wait()
	var st Stats
	for _, sh := range shards {
		st.add(sh.stats())
	}
	if err := r.err(); err != nil {
		if a, ok := tr.(Aborter); ok {
			a.Abort(err)
		}
		return st, err
	}
	return st, nil
}

// check validates the buffers' lengths.
func (b Buffers) check(cfg AllReduceConfig) error {
	n := len(b.Dst)
	bad := b.Src != nil && len(b.Src) != n
	if cfg.ErrorFeedback {
		bad = bad || (b.ResIn == nil) != (b.ResOut == nil) || b.ResIn != nil && (len(b.ResIn) != n || len(b.ResOut) != n)
	}
	if bad {
		return fmt.Errorf("%w: buffers of %d (src), %d (dst), %d and %d (residuals) values", ErrInvalidArgument,
			len(b.Src), n, len(b.ResIn), len(b.ResOut))
	}
	return nil
}

// fill copies src into x unless src is nil (x holds the input already).
func fill(x, src []float32) {
	if src != nil {
		copy(x, src)
	}
}

// weightScale validates weights and returns weights[rank] / Σ weights.
func weightScale(weights []float32, rank int) (float32, error) {
	if len(weights) == 0 || rank < 0 || rank >= len(weights) {
		return 0, fmt.Errorf("%w: rank %d of %d members", ErrInvalidArgument, rank, len(weights))
	}
	var total float64
	for i, w := range weights {
		if !(w >= 0) || math.IsInf(float64(w), 0) {
			return 0, fmt.Errorf("%w: weight %d is %v", ErrInvalidArgument, i, w)
		}
		total += float64(w)
	}
	if !(total > 0) || math.IsInf(total, 0) {
		return 0, fmt.Errorf("%w: weights sum to %v", ErrInvalidArgument, total)
	}
	return float32(float64(weights[rank]) / total), nil
}

// weightScales returns weights[i] / Σ weights for every member, as
// weightScale computes it (weights validated).
func weightScales(weights []float32) []float32 {
	var total float64
	for _, w := range weights {
		total += float64(w)
	}
	out := make([]float32, len(weights))
	for i, w := range weights {
		out[i] = float32(float64(w) / total)
	}
	return out
}

// span returns part i of n items split into parts nearly equal parts.
func span(n, parts, i int) (lo, hi int) {
	return int(int64(n) * int64(i) / int64(parts)), int(int64(n) * int64(i+1) / int64(parts))
}

func sub(s []float32, lo, hi int) []float32 {
	if s == nil {
		return nil
	}
	return s[lo:hi]
}

// reduceAlone is the ring of one. Nothing crosses a wire, so nothing is
// quantized whatever cfg.Codec says: the member keeps its exact (scaled)
// vector plus any residual carried from earlier rings (β·residual with the
// compressed codecs), checked for non-finite values as the fp32 codec
// checks them. A lone node thus trains exactly as it would without
// DiLoCo's averaging (outer lr 1, momentum 0).
func reduceAlone(src, vec, residual, resOut []float32, scale float32, cfg AllReduceConfig) error {
	var c coder
	c.init(CodecFP32)
	payload := make([]byte, CodecFP32.msgSize(min(cfg.ChunkElems, len(vec))))
	for lo := 0; lo < len(vec); lo += cfg.ChunkElems {
		hi := min(lo+cfg.ChunkElems, len(vec))
		x := vec[lo:hi]
		fill(x, sub(src, lo, hi))
		if cfg.Codec.compressed() {
			addDecayed(x, sub(residual, lo, hi), cfg.FeedbackDecay) // scale is 1
		} else {
			c.prepare(x, sub(residual, lo, hi), scale)
		}
		if err := c.encodeOwned(payload, x, sub(resOut, lo, hi)); err != nil {
			return err
		}
	}
	return nil
}

// ring is the state of one AllReduce call shared by its shards.
type ring struct {
	parent, ctx context.Context
	cancel      context.CancelFunc
	tr          Transport
	rank, k     int
	cfg         AllReduceConfig

	mu    sync.Mutex
	first error
}

func (r *ring) left() int  { return (r.rank + r.k - 1) % r.k }
func (r *ring) right() int { return (r.rank + 1) % r.k }

// fail records the first error of the attempt and stops all shards. Errors
// that follow are consequences of the first.
func (r *ring) fail(err error) {
	r.mu.Lock()
	if r.first == nil {
		r.first = err
	}
	r.mu.Unlock()
	r.cancel()
}

func (r *ring) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// transportErr names the neighbour behind a failed Send or Recv, unless the
// transport already named the member at fault or the caller cancelled.
func (r *ring) transportErr(peer int, op string, shard int, err error) error {
	var pe *PeerError
	if errors.As(err, &pe) {
		return err
	}
	if r.parent.Err() == context.Canceled {
		return context.Canceled
	}
	return &PeerError{Rank: peer, Err: fmt.Errorf("%s shard %d: %w", op, shard, err)}
}

// prepare turns x into this member's contribution: x·scale + residual.
func prepare(x, res []float32, scale float32) {
	if res != nil {
		res = res[:len(x)]
		for i := range x {
			x[i] = x[i]*scale + res[i]
		}
		return
	}
	if scale != 1 {
		for i := range x {
			x[i] *= scale
		}
	}
}

// coder encodes and decodes chunk payloads for one goroutine.
type coder struct {
	codec Codec
	qz    quantizer
	t     [256]float32
	st    chunkStats // of the chunk last prepared
}

// prepare turns x into this member's contribution, x·scale + res.
func (c *coder) prepare(x, res []float32, scale float32) {
	if c.codec == CodecFP32 {
		prepare(x, res, scale)
		return
	}
	c.st = prepScan(x, res, scale)
}

// prepareAdd is prepare, then adds the values of a received payload.
func (c *coder) prepareAdd(x, res []float32, scale float32, payload []byte) error {
	if c.codec == CodecFP32 {
		prepare(x, res, scale)
		return decodeFP32(x, payload, true)
	}
	if err := readTable(&c.t, payload); err != nil {
		return err
	}
	c.st = prepAddScan(x, res, scale, &c.t, payload[int8TableSize:int8TableSize+len(x)])
	return nil
}

func (c *coder) init(codec Codec) { c.codec = codec }

// encodeSent writes the payload of x, which this member forwards; with res
// it stores there what the quantization lost. x must come from prepare or
// prepareAdd.
func (c *coder) encodeSent(payload []byte, x, res []float32) error {
	if c.codec == CodecFP32 {
		clear(res)
		return encodeFP32(payload, x)
	}
	if err := c.qz.encodeInt8Scanned(payload, &c.t, x, c.st); err != nil {
		return err
	}
	if res != nil {
		residualInt8(res, x, &c.t, payload[int8TableSize:int8TableSize+len(x)])
	}
	return nil
}

// encodeOwned writes the payload of a fully reduced x and replaces x with
// the values every member will decode from it.
func (c *coder) encodeOwned(payload []byte, x, res []float32) error {
	if c.codec == CodecFP32 {
		clear(res)
		return encodeFP32(payload, x)
	}
	if err := c.qz.encodeInt8Scanned(payload, &c.t, x, c.st); err != nil {
		return err
	}
	codes := payload[int8TableSize : int8TableSize+len(x)]
	if res != nil {
		decodeInt8Residual(x, res, &c.t, codes)
	} else {
		decodeInt8Set(x, &c.t, codes)
	}
	return nil
}

// decode adds (add) or copies the values of payload into x.
func (c *coder) decode(x []float32, payload []byte, add bool) error {
	if c.codec == CodecFP32 {
		return decodeFP32(x, payload, add)
	}
	if err := readTable(&c.t, payload); err != nil {
		return err
	}
	if add {
		decodeInt8Add(x, &c.t, payload[int8TableSize:])
	} else {
		decodeInt8Set(x, &c.t, payload[int8TableSize:])
	}
	return nil
}

// Phases of the chunk header.
const (
	phaseScatter = 0
	phaseGather  = 1
)

// shardRun is one shard's ring: a receiving goroutine (run) that adds,
// re-encodes and queues chunks, and a sending goroutine (sendLoop) that
// encodes this member's own segment first and then drains the queue.
type shardRun struct {
	r         *ring
	s         int
	src       []float32 // this shard's input, read only (nil: vec holds it)
	vec, res  []float32 // this shard's slice; res is the residual carried in
	resOut    []float32 // where the new residual goes (may be res)
	scale     float32
	segs      []int // k+1 segment boundaries in vec
	out       chan []byte
	free      chan []byte
	msgCap    int
	step0Done chan struct{}

	send, recv coder
	sent, got  Stats
}

func newShardRun(r *ring, s int, src, vec, res, resOut []float32, scale float32) *shardRun {
	sr := &shardRun{r: r, s: s, src: src, vec: vec, res: res, resOut: resOut, scale: scale, segs: make([]int, r.k+1),
		step0Done: make(chan struct{})}
	for i := range sr.segs {
		sr.segs[i], _ = span(len(vec), r.k, i)
	}
	ce := r.cfg.ChunkElems
	maxSeg := (len(vec) + r.k - 1) / r.k
	maxChunks := (maxSeg + ce - 1) / ce
	// A queue longer than a segment's chunks cannot fill up: every member
	// injects one segment and each received chunk queues at most one more, so
	// the ring never holds more than k segments of messages (no deadlock).
	sr.out = make(chan []byte, maxChunks+1)
	sr.free = make(chan []byte, maxChunks+3)
	sr.msgCap = r.cfg.Codec.msgSize(min(ce, maxSeg))
	sr.send.init(r.cfg.Codec)
	sr.recv.init(r.cfg.Codec)
	return sr
}

func (sr *shardRun) stats() Stats {
	st := sr.sent
	st.add(sr.got)
	return st
}

func (sr *shardRun) nChunks(seg int) int {
	n := sr.segs[seg+1] - sr.segs[seg]
	return (n + sr.r.cfg.ChunkElems - 1) / sr.r.cfg.ChunkElems
}

func (sr *shardRun) chunk(seg, c int) (lo, hi int) {
	lo = sr.segs[seg] + c*sr.r.cfg.ChunkElems
	return lo, min(lo+sr.r.cfg.ChunkElems, sr.segs[seg+1])
}

func (sr *shardRun) buf(n int) []byte {
	var b []byte
	select {
	case b = <-sr.free:
	default:
		b = make([]byte, sr.msgCap)
	}
	return b[:sr.r.cfg.Codec.msgSize(n)]
}

func (sr *shardRun) release(b []byte) {
	select {
	case sr.free <- b[:cap(b)]:
	default:
	}
}

func (sr *shardRun) header(phase uint8, step, c, n int) chunkHeader {
	return chunkHeader{codec: sr.r.cfg.Codec, phase: phase, step: uint16(step), chunk: uint32(c), n: uint32(n)}
}

func (sr *shardRun) run() { sr.r.runPair(sr.sendLoop, sr.recvLoop) }

// runPair runs send on its own goroutine and recv on this one, fails the
// attempt with recv's error and joins send.
func (r *ring) runPair(send func(), recv func() error) {
	var wg sync.WaitGroup
	wg.Go(send)
	if err := recv(); err != nil {
		r.fail(err)
	}
	wg.Wait()
}

// forward sends, with xmit, every message queued on out, until out is
// closed or the attempt ends; a failed send fails the attempt.
func (r *ring) forward(out <-chan []byte, xmit func([]byte) error) {
	for {
		select {
		case msg, ok := <-out:
			if !ok {
				return
			}
			if err := xmit(msg); err != nil {
				r.fail(err)
				return
			}
		case <-r.ctx.Done():
			return
		}
	}
}

// sendLoop sends this member's own segment (reduce-scatter step 0), then
// every chunk recvLoop queues, in order.
func (sr *shardRun) sendLoop() {
	r := sr.r
	step0 := sync.OnceFunc(func() { close(sr.step0Done) })
	defer step0()
	for c := range sr.nChunks(r.rank) {
		lo, hi := sr.chunk(r.rank, c)
		x, res := sr.vec[lo:hi], sub(sr.res, lo, hi)
		fill(x, sub(sr.src, lo, hi))
		sr.send.prepare(x, res, sr.scale)
		msg := sr.buf(hi - lo)
		putHeader(msg, sr.header(phaseScatter, 0, c, hi-lo))
		if err := sr.send.encodeSent(msg[chunkHeaderSize:], x, sub(sr.resOut, lo, hi)); err != nil {
			r.fail(fmt.Errorf("mesh: shard %d own values: %w", sr.s, err))
			return
		}
		if err := sr.xmit(msg); err != nil {
			r.fail(err)
			return
		}
	}
	step0()
	r.forward(sr.out, sr.xmit)
}

func (sr *shardRun) xmit(msg []byte) error {
	r := sr.r
	if err := r.tr.Send(r.ctx, sr.s, msg); err != nil {
		return r.transportErr(r.right(), "send", sr.s, err)
	}
	sr.sent.BytesSent += int64(len(msg))
	sr.sent.MsgsSent++
	sr.release(msg)
	return nil
}

func (sr *shardRun) push(msg []byte) error {
	select {
	case sr.out <- msg:
		return nil
	case <-sr.r.ctx.Done():
		// The sender is stuck on the right neighbour.
		return sr.r.transportErr(sr.r.right(), "queue", sr.s, sr.r.ctx.Err())
	}
}

// recvChunk receives the next chunk and checks it is the one expected.
func (sr *shardRun) recvChunk(want chunkHeader) ([]byte, error) {
	r := sr.r
	msg, err := r.tr.Recv(r.ctx, sr.s)
	if err != nil {
		return nil, r.transportErr(r.left(), "recv", sr.s, err)
	}
	sr.got.BytesRecv += int64(len(msg))
	sr.got.MsgsRecv++
	payload, err := parseChunk(msg, want)
	if err != nil {
		return nil, &PeerError{Rank: r.left(), Err: fmt.Errorf("shard %d: %w", sr.s, err)}
	}
	return payload, nil
}

func (sr *shardRun) recvLoop() error {
	if err := sr.reduceScatter(); err != nil {
		return err
	}
	select {
	case <-sr.step0Done:
	case <-sr.r.ctx.Done():
		return sr.r.transportErr(sr.r.right(), "send", sr.s, sr.r.ctx.Err())
	}
	if err := sr.allGather(); err != nil {
		return err
	}
	close(sr.out)
	return nil
}

// reduceScatter: at step j, segment rank−j−1 arrives from the left holding
// the sum of j+1 members; add ours and forward it, or, at the last step,
// quantize the complete segment (rank+1) once for the all-gather.
func (sr *shardRun) reduceScatter() error {
	r, k := sr.r, sr.r.k
	for j := range k - 1 {
		seg := (r.rank - j - 1 + 2*k) % k
		for c := range sr.nChunks(seg) {
			lo, hi := sr.chunk(seg, c)
			payload, err := sr.recvChunk(sr.header(phaseScatter, j, c, hi-lo))
			if err != nil {
				return err
			}
			x, res, resOut := sr.vec[lo:hi], sub(sr.res, lo, hi), sub(sr.resOut, lo, hi)
			fill(x, sub(sr.src, lo, hi))
			if err := sr.recv.prepareAdd(x, res, sr.scale, payload); err != nil {
				return &PeerError{Rank: r.left(), Err: fmt.Errorf("shard %d: %w", sr.s, err)}
			}
			msg := sr.buf(hi - lo)
			if j < k-2 {
				putHeader(msg, sr.header(phaseScatter, j+1, c, hi-lo))
				err = sr.recv.encodeSent(msg[chunkHeaderSize:], x, resOut)
			} else {
				putHeader(msg, sr.header(phaseGather, 0, c, hi-lo))
				err = sr.recv.encodeOwned(msg[chunkHeaderSize:], x, resOut)
			}
			if err != nil {
				return fmt.Errorf("mesh: shard %d sum of segment %d: %w", sr.s, seg, err)
			}
			if err := sr.push(msg); err != nil {
				return err
			}
		}
	}
	return nil
}

// allGather: at step j, the final bytes of segment rank−j arrive from the
// left; decode them and forward the same bytes unless the right neighbour
// (who completed that segment) already has them.
func (sr *shardRun) allGather() error {
	r, k := sr.r, sr.r.k
	for j := range k - 1 {
		seg := (r.rank - j + k) % k
		for c := range sr.nChunks(seg) {
			lo, hi := sr.chunk(seg, c)
			payload, err := sr.recvChunk(sr.header(phaseGather, j, c, hi-lo))
			if err != nil {
				return err
			}
			if err := sr.recv.decode(sr.vec[lo:hi], payload, false); err != nil {
				return &PeerError{Rank: r.left(), Err: fmt.Errorf("shard %d: %w", sr.s, err)}
			}
			if j == k-2 {
				continue
			}
			msg := sr.buf(hi - lo)
			copy(msg[chunkHeaderSize:], payload)
			putHeader(msg, sr.header(phaseGather, j+1, c, hi-lo))
			if err := sr.push(msg); err != nil {
				return err
			}
		}
	}
	return nil
}
