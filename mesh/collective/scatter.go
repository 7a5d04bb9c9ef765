package collective

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
)

// MeshTransport connects one member to every other member of an attempt,
// for ScatterAllReduce. Each (peer, lane) pair is an independent, ordered,
// reliable channel in each direction; lane l (0 ≤ l < 2·Shards) carries, for
// shard s, the contributions sent to segment owners (l = s) or the owners'
// results (l = Shards + s). A (peer, lane) channel is used by one sending
// and one receiving goroutine at a time; different ones concurrently.
type MeshTransport interface {
	// Send delivers msg to member to on lane. It may block until to has
	// room; it must not retain msg after it returns, and must return
	// promptly (with ctx.Err() or a transport error) once ctx is done.
	Send(ctx context.Context, to, lane int, msg []byte) error
	// Recv returns the next message from member from on lane. The slice is
	// valid until the next Recv from that member on that lane. It must
	// return promptly once ctx is done.
	Recv(ctx context.Context, from, lane int) ([]byte, error)
}

// Phases of the chunk header used by the direct scatter (the ring's are 0
// and 1). The header's step field holds the segment index.
const (
	phaseDirectScatter = 2 // a member's contribution to a segment owner
	phaseDirectGather  = 3 // an owner's robust result
)

// MaxScatterMembers bounds the members of a scatter all-reduce: an owner
// holds one decoded chunk per member.
const MaxScatterMembers = 256

// ScatterConfig configures ScatterAllReduce. Every member of an attempt must
// use the same values.
type ScatterConfig struct {
	// Shards: independent slices of the vector, each with its own pair of
	// lanes. Default DefaultShards; 1..MaxShards.
	Shards int
	// ChunkElems: values per message, the unit the robust rule works on
	// (norms, medians and clipping are per chunk). Default
	// DefaultChunkElems; 1..MaxChunkElems.
	ChunkElems int
	// Codec is the wire format of the contributions and of the owners'
	// results. Default CodecInt8. Its parameters (FeedbackDecay, TopK,
	// TopKBlock, TopKBits) are AllReduceConfig's.
	Codec         Codec
	FeedbackDecay float32
	TopK          int
	TopKBlock     int
	TopKBits      int
	// ErrorFeedback, with ResIn and ResOut, adds ResIn to this member's
	// contribution (β·ResIn for the compressed codecs, β = FeedbackDecay)
	// and stores in ResOut what encoding it lost.
	ErrorFeedback bool
	// ResultFeedback: an owner with ErrorFeedback also adds its result's
	// encoding error to its ResOut, × Σw / its own weight (the gain of the
	// mean when nothing is clipped). Default FeedbackOn for CodecInt8,
	// FeedbackOff for the others: the owner's next contribution to its own
	// segment grows by about k × that error, which a norm clip can cut and
	// a top-k selection spends its entries on.
	ResultFeedback Feedback
	// Robust is the owners' rule.
	Robust RobustConfig
	// Audit keeps what a spot check of an owner needs (see AuditChunk):
	// each owner's SegmentReport.Inputs (ScatterResult's SentChunks and
	// GotChunks are always kept).
	Audit bool
	// Owners lists, in segment order, the ranks that own a segment: each
	// shard's slice is cut into len(Owners) segments and segment j goes to
	// member Owners[j]. The other members are clients: they send their
	// contribution to every owner and receive every result, but own
	// nothing, so they need direct links to the owners only (a member
	// behind a NAT the others cannot reach). Nil means every member owns
	// one segment, segment j member j.
	Owners []int
}

// Feedback is a switch whose default depends on the codec.
type Feedback uint8

// Feedback values. Append only, never renumber.
const (
	FeedbackDefault Feedback = 0 // the codec's default (Validate resolves it)
	FeedbackOn      Feedback = 1
	FeedbackOff     Feedback = 2
)

// Validate fills defaults and rejects out-of-range values.
func (c *ScatterConfig) Validate() error {
	ar := c.ring()
	if err := ar.Validate(); err != nil {
		return err
	}
	c.Shards, c.ChunkElems, c.Codec, c.FeedbackDecay = ar.Shards, ar.ChunkElems, ar.Codec, ar.FeedbackDecay
	c.TopK, c.TopKBlock, c.TopKBits = ar.TopK, ar.TopKBlock, ar.TopKBits
	switch c.ResultFeedback {
	case FeedbackDefault:
		c.ResultFeedback = FeedbackOff
		if c.Codec == CodecInt8 {
			c.ResultFeedback = FeedbackOn
		}
	case FeedbackOn, FeedbackOff:
	default:
		return fmt.Errorf("%w: ResultFeedback %d", ErrInvalidArgument, c.ResultFeedback)
	}
	return c.Robust.Validate()
}

// ring is the AllReduceConfig of c's shards, chunks and codec.
func (c *ScatterConfig) ring() AllReduceConfig {
	return AllReduceConfig{Shards: c.Shards, ChunkElems: c.ChunkElems, Codec: c.Codec, FeedbackDecay: c.FeedbackDecay,
		TopK: c.TopK, TopKBlock: c.TopKBlock, TopKBits: c.TopKBits, ErrorFeedback: c.ErrorFeedback}
}

// params is the codec of a validated c.
func (c *ScatterConfig) params() codecParams {
	ar := c.ring()
	return ar.params()
}

// Commitment is a SHA-256: of one chunk message (headers included), or,
// for a member's contribution to one segment or an owner's result, of the
// SHA-256s of its chunk messages in chunk order (commitChunks), so that
// each byte is hashed once and a single chunk can be checked against it.
type Commitment [sha256.Size]byte

// commitChunks is the commitment of a segment's messages from their
// chunks' hashes.
func commitChunks(chunks []Commitment) Commitment {
	h := sha256.New()
	for _, c := range chunks {
		h.Write(c[:])
	}
	var out Commitment
	h.Sum(out[:0])
	return out
}

// CommitMessages is the commitment of concatenated chunk messages (as
// RobustSegment returns a result), for comparing with Sent, Got,
// Received or Result; ok is false if msgs is not a whole number of chunk
// messages whose lengths their headers state (chunkMsgLen).
func CommitMessages(msgs []byte) (c Commitment, ok bool) {
	var chunks []Commitment
	for len(msgs) > 0 {
		m, ok := chunkMsgLen(msgs)
		if !ok {
			return c, false
		}
		chunks = append(chunks, sha256.Sum256(msgs[:m]))
		msgs = msgs[m:]
	}
	return commitChunks(chunks), true
}

// SegmentReport is what the owner of one segment of one shard publishes
// about an attempt, so that each member can check what the owner did with
// its contribution.
type SegmentReport struct {
	Shard, Segment int
	// Received holds, per member, the commitment of what the owner
	// received (its own contribution included).
	Received []Commitment
	// Verdicts holds, per chunk of the segment, one Verdict per member.
	Verdicts [][]Verdict
	// MedianNorms holds, per chunk, the L2 norm of the coordinate-wise
	// median the rule started from (0 for the trimmed mean): with the
	// Verdicts' Norm and Dot, each contribution's cosine with it.
	MedianNorms []float32
	// Result is the commitment of the result messages the owner sent to
	// every member (compare with each member's ScatterResult.Got: an owner
	// sending different bytes to different members is caught there).
	Result Commitment
	// Inputs (with ScatterConfig.Audit) holds, per member, the chunk
	// messages the owner combined, concatenated in chunk order (what
	// Received commits to); ChunkInputs cuts out one chunk.
	Inputs [][]byte
}

// MessageNorm returns the L2 norm of the values of one chunk message
// (header and payload, any codec) as an owner's Verdict.Norm states it,
// bit for bit: float64 squares of the decoded values summed in order
// (zeros left out: a top-k message's kept values), +Inf when one is not
// finite. ok is false if msg is not such a message.
func MessageNorm(msg []byte) (norm float32, ok bool) {
	n, ok := chunkMsgLen(msg)
	if !ok || n != len(msg) {
		return 0, false
	}
	return messageNorm(msg), true
}

// messageNorm is MessageNorm of a message whose length is its own.
func messageNorm(msg []byte) float32 {
	var n float64
	p, vals := msg[chunkHeaderSize:], int(binary.BigEndian.Uint32(msg[8:]))
	switch c := Codec(msg[0]); c {
	case CodecInt8:
		var t [256]float32
		var sq [256]float64
		rawTable(&t, p)
		n = codedNorm(&sq, &t, p[int8TableSize:])
	case CodecFP32:
		var s float64
		for i := range vals {
			v := float64(math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:])))
			s += float64(v * v)
		}
		n = math.Sqrt(s)
	case CodecQ4, CodecQ2, CodecQ1, CodecTopK:
		n = compressedNorm(c, p, vals)
	}
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return float32(math.Inf(1))
	}
	return float32(n)
}

// compressedNorm is the norm of the values of a dense or top-k payload
// of n values (its length checked): the squares of its table entries
// summed in code order.
func compressedNorm(c Codec, p []byte, n int) float64 {
	b, codes, table, skip := denseBits(c), n, 0, 0
	if c == CodecTopK {
		d, _, _ := readTopkDesc(p, n)
		b, codes, table, skip = d.bits, d.entries, topkDescSize, d.entries*indexBits(d.block)
		if d.form == topkCounted {
			skip += (n + d.block - 1) / d.block * countBits(d.block)
		}
	}
	var t [maxLevels]float32
	var sq [maxLevels]float64
	_ = loadTable(t[:1<<b], p[table:], false)
	for i, x := range t[:1<<b] {
		sq[i] = float64(float64(x) * float64(x))
	}
	br := bitReader{buf: p[table+4<<b:], off: skip / 8}
	br.get(skip % 8)
	var s float64
	for range codes {
		s += sq[br.get(b)]
	}
	return math.Sqrt(s)
}

// ChunkInputs returns the k members' messages of chunk c as the owner
// combined them (sub-slices of Inputs), or nil if the report holds no
// such chunk.
func (rep *SegmentReport) ChunkInputs(c int) [][]byte {
	if c < 0 || c >= len(rep.Verdicts) || len(rep.Inputs) == 0 {
		return nil
	}
	out := make([][]byte, len(rep.Inputs))
	for i, in := range rep.Inputs {
		off := 0
		for range c {
			m, ok := chunkMsgLen(in[off:])
			if !ok {
				return nil
			}
			off += m
		}
		m, ok := chunkMsgLen(in[off:])
		if !ok {
			return nil
		}
		out[i] = in[off : off+m]
	}
	return out
}

// chunkMsgLen is the length of the chunk message at the start of b, from
// its header (and a top-k message's descriptor): false if b does not hold
// that much, or the header names no codec.
func chunkMsgLen(b []byte) (int, bool) {
	if len(b) < chunkHeaderSize {
		return 0, false
	}
	n, m := int(binary.BigEndian.Uint32(b[8:])), 0
	if n > MaxChunkElems {
		return 0, false
	}
	switch c := Codec(b[0]); c {
	case CodecInt8, CodecFP32:
		m = c.msgSize(n)
	case CodecQ4, CodecQ2, CodecQ1:
		m = codecParams{codec: c, bits: denseBits(c)}.msgSize(n)
	case CodecTopK:
		var ok bool
		if _, m, ok = readTopkDesc(b[chunkHeaderSize:], n); !ok {
			return 0, false
		}
	default:
		return 0, false
	}
	return m, m <= len(b)
}

// ScatterResult is the accountability output of one ScatterAllReduce.
type ScatterResult struct {
	Stats Stats
	// Sent holds this member's commitments, index shard·o + segment, o
	// the number of owners (its own segments included): compare them with
	// the owners' Received.
	Sent []Commitment
	// Got holds the commitments of the results received, index
	// shard·o + segment (own results included).
	Got []Commitment
	// Owned holds, per shard, the report of the segment this member owns
	// (none for a client); on error, the shards finished before it.
	Owned []SegmentReport
	// SentChunks and GotChunks hold, index shard·o + segment, the SHA-256
	// of each chunk message this member sent to the segment's owner and of
	// each result message it received from it (its own segment's result
	// included): Sent and Got are commitChunks of them.
	SentChunks, GotChunks [][]Commitment
	// SentNorms holds, index shard·o + segment, the norm of each chunk
	// this member sent as its owner's verdict states it (MessageNorm):
	// what an owner's published norms are checked against.
	SentNorms [][]float32
}

// ScatterAllReduce replaces, on every member of an attempt of k =
// len(weights) members, b.Dst with a robust weighted mean of the members'
// vectors (b.Src, or b.Dst when Src is nil). Each shard's slice is cut into
// one segment per owner (cfg.Owners; by default k, as the ring cuts it);
// member i encodes its contribution to every segment once with cfg.Codec
// and sends segment j straight to its owner (member j by default); the
// owner decodes the k contributions chunk by chunk, combines them with
// cfg.Robust (the code RobustSegment runs for an auditor), encodes
// the result once with the same codec (a top-k result on the union of the
// admitted members' supports) and sends the same bytes to everyone, who
// decode them:
// every member ends with bit-identical values. rank is this member's index;
// weights must be the same on every member, finite, ≥ 0, with a positive
// sum (the rule caps them at cfg.Robust.MaxWeight).
//
// On error the result holds what was learnt so far, Dst and ResOut are
// unspecified, Src and ResIn are untouched, and the error is a *PeerError
// naming the member at fault when one is known (a malformed message, a
// broken or timed out link), context.Canceled when ctx was cancelled, or
// wraps ErrInvalidArgument.
func ScatterAllReduce(ctx context.Context, tr MeshTransport, rank int, weights []float32, b Buffers, cfg ScatterConfig) (ScatterResult, error) {
	if err := cfg.Validate(); err != nil {
		return ScatterResult{}, err
	}
	if err := checkScatterArgs(rank, weights, b, cfg); err != nil {
		return ScatterResult{}, err
	}
	if !cfg.ErrorFeedback {
		b.ResIn, b.ResOut = nil, nil
	}
	k := len(weights)
	sc := newScatter(rank, k, weights, cfg)
	sc.parent, sc.tr = ctx, tr
	sc.ctx, sc.cancel = context.WithCancel(ctx)
	defer sc.cancel()
	runs := make([]*scatterShard, cfg.Shards)
	var wg sync.WaitGroup
	for s := range runs {
		lo, hi := span(len(b.Dst), cfg.Shards, s)
		runs[s] = newScatterShard(sc, s, Buffers{Src: sub(b.Src, lo, hi), Dst: b.Dst[lo:hi],
			ResIn: sub(b.ResIn, lo, hi), ResOut: sub(b.ResOut, lo, hi)})
		wg.Go(runs[s].run)
	}
	wg.Wait()
	res := ScatterResult{Sent: make([]Commitment, 0, cfg.Shards*k), Got: make([]Commitment, 0, cfg.Shards*k)}
	for _, r := range runs {
		res.Stats.add(r.stats())
		res.Sent = append(res.Sent, r.sentHash...)
		res.Got = append(res.Got, r.gotHash...)
		res.SentChunks = append(res.SentChunks, r.sentChunks...)
		res.SentNorms = append(res.SentNorms, r.sentNorms...)
		res.GotChunks = append(res.GotChunks, r.gotChunks...)
		if r.owned != nil {
			res.Owned = append(res.Owned, *r.owned)
		}
	}
	if err := sc.err(); err != nil {
		if a, ok := tr.(Aborter); ok {
			a.Abort(err)
		}
		return res, err
	}
	return res, nil
}

// checkScatterArgs validates rank, weights and buffers.
func checkScatterArgs(rank int, weights []float32, b Buffers, cfg ScatterConfig) error {
	if len(weights) > MaxScatterMembers {
		return fmt.Errorf("%w: %d members, more than %d", ErrInvalidArgument, len(weights), MaxScatterMembers)
	}
	if _, err := weightScale(weights, rank); err != nil {
		return err
	}
	if cfg.Owners != nil {
		if len(cfg.Owners) == 0 || len(cfg.Owners) > len(weights) {
			return fmt.Errorf("%w: %d owners for %d members", ErrInvalidArgument, len(cfg.Owners), len(weights))
		}
		seen := make([]bool, len(weights))
		for _, o := range cfg.Owners {
			if o < 0 || o >= len(weights) || seen[o] {
				return fmt.Errorf("%w: owners %v for %d members", ErrInvalidArgument, cfg.Owners, len(weights))
			}
			seen[o] = true
		}
	}
	return b.check(AllReduceConfig{ErrorFeedback: cfg.ErrorFeedback})
}

// newScatter is the state of member rank of k, without its context and
// transport.
func newScatter(rank, k int, weights []float32, cfg ScatterConfig) *scatter {
	sc := &scatter{rank: rank, k: k, weights: weights, cfg: cfg, p: cfg.params(), owners: cfg.Owners, seg: -1}
	if sc.owners == nil {
		sc.owners = make([]int, k)
		for i := range k {
			sc.owners[i] = i
		}
	}
	sc.seg = slices.Index(sc.owners, rank)
	return sc
}

// scatter is the state of one ScatterAllReduce shared by its shards.
type scatter struct {
	parent, ctx context.Context
	cancel      context.CancelFunc
	tr          MeshTransport
	rank, k     int
	weights     []float32
	cfg         ScatterConfig
	p           codecParams // cfg's codec
	owners      []int       // segment j's owner (cfg.Owners, or every member)
	seg         int         // the segment this member owns, -1 for a client

	mu    sync.Mutex
	first error
	blame int // blameRank of first
}

// fail records the error of the attempt and stops everything. When the
// deadline stops every goroutine at once, the member named must be the one
// the others were waiting for, not one that was waiting too; so errors rank
// (blameRank): evidence (malformed bytes, a broken link, a relayed abort)
// first, then a contribution that did not come (its sender waits for
// nobody), then a result that did not come (its owner may be waiting for a
// contribution), then a send that did not go through (the receiver may be
// waiting for someone else). Among equals the first error wins; the others
// are its consequences.
func (sc *scatter) fail(err error) {
	blame := blameRank(err)
	sc.mu.Lock()
	if sc.first == nil || blame < sc.blame {
		sc.first, sc.blame = err, blame
	}
	sc.mu.Unlock()
	sc.cancel()
}

// Ranks of blameRank, most convincing first.
const (
	blameEvidence       = iota // malformed bytes, a broken link, a relayed abort
	blameNoContribution        // an owner's receive of a contribution timed out
	blameNoResult              // a receive of an owner's result timed out
	blameStuck                 // a send timed out
)

func blameRank(err error) int {
	var te *timeoutError
	if !errors.As(err, &te) {
		return blameEvidence
	}
	return te.blame
}

// timeoutError marks a *PeerError caused by the caller's deadline.
type timeoutError struct {
	blame int
	err   error
}

func (e *timeoutError) Error() string { return e.err.Error() }
func (e *timeoutError) Unwrap() error { return e.err }

func (sc *scatter) err() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.first
}

// transportErr names peer for a failed Send or Recv, unless the transport
// named the member at fault already or the caller cancelled.
func (sc *scatter) transportErr(peer int, op string, lane int, err error) error {
	var pe *PeerError
	if errors.As(err, &pe) {
		return err
	}
	switch {
	case errors.Is(sc.parent.Err(), context.Canceled):
		return context.Canceled
	case errors.Is(sc.parent.Err(), context.DeadlineExceeded):
		blame := blameStuck
		if op == "recv" && lane < sc.cfg.Shards {
			blame = blameNoContribution
		} else if op == "recv" {
			blame = blameNoResult
		}
		return &PeerError{Rank: peer, Err: &timeoutError{blame: blame, err: fmt.Errorf("%s lane %d: %w", op, lane, err)}}
	}
	return &PeerError{Rank: peer, Err: fmt.Errorf("%s lane %d: %w", op, lane, err)}
}

// AuditChunk recomputes what the owner of segment seg must have sent for
// its chunk c, from the k members' messages of that chunk (msgs[i] from
// member i, as SegmentReport.ChunkInputs returns them). It returns the
// result message and the verdicts; an auditor compares the result's
// SHA-256 with its ScatterResult.GotChunks, and its own input's with its
// SentChunks. A malformed input is a *PeerError naming its sender.
func AuditChunk(cfg ScatterConfig, weights []float32, seg, c int, msgs [][]byte) ([]byte, []Verdict, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if err := checkScatterArgs(0, weights, Buffers{}, cfg); err != nil {
		return nil, nil, err
	}
	k := len(weights)
	if len(msgs) != k || seg < 0 || seg > 0xffff || c < 0 {
		return nil, nil, fmt.Errorf("%w: %d inputs for %d members, segment %d chunk %d", ErrInvalidArgument, len(msgs), k, seg, c)
	}
	if len(msgs[0]) < chunkHeaderSize {
		return nil, nil, &PeerError{Rank: 0, Err: fmt.Errorf("%w: %d bytes", ErrBadChunk, len(msgs[0]))}
	}
	n := int(binary.BigEndian.Uint32(msgs[0][8:]))
	if n < 1 || n > cfg.ChunkElems {
		return nil, nil, &PeerError{Rank: 0, Err: fmt.Errorf("%w: chunk of %d values", ErrBadChunk, n)}
	}
	want := chunkHeader{codec: cfg.Codec, phase: phaseDirectScatter, step: uint16(seg), chunk: uint32(c), n: uint32(n)}
	ow := newOwnerWork(cfg.params(), k, n)
	defer putOwnerWork(ow)
	for i, m := range msgs {
		if err := checkContribution(&ow.pk, m, want); err != nil {
			return nil, nil, &PeerError{Rank: i, Err: err}
		}
	}
	out, v, err := ow.combine(&cfg.Robust, weights, msgs, seg, -1, c)
	if err != nil {
		return nil, nil, err
	}
	return slices.Clone(out), v, nil
}

// RobustSegment recomputes what the owner of segment seg (n values) must
// have sent, from the k contributions it received: contribs[i] is member
// i's chunk messages for that segment, concatenated in chunk order (what
// the owner's SegmentReport.Received commits to). It returns the owner's
// result messages, concatenated in chunk order, and the verdicts per chunk.
// The owner runs the same code on the same bytes, so an auditor compares
// bytes. A malformed contribution is a *PeerError naming its sender.
func RobustSegment(cfg ScatterConfig, weights []float32, seg, n int, contribs [][]byte) ([]byte, [][]Verdict, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	k := len(weights)
	if err := checkScatterArgs(0, weights, Buffers{}, cfg); err != nil {
		return nil, nil, err
	}
	segs := k
	if cfg.Owners != nil {
		segs = len(cfg.Owners)
	}
	if seg < 0 || seg >= segs {
		return nil, nil, fmt.Errorf("%w: segment %d", ErrInvalidArgument, seg)
	}
	if len(contribs) != k || n < 0 {
		return nil, nil, fmt.Errorf("%w: %d contributions of %d values for %d members", ErrInvalidArgument, len(contribs), n, k)
	}
	ce, p := cfg.ChunkElems, cfg.params()
	size := p.segmentSize(n, ce)
	for i, m := range contribs {
		if len(m) != size {
			return nil, nil, &PeerError{Rank: i, Err: fmt.Errorf("%w: %d bytes for %d values", ErrBadChunk, len(m), n)}
		}
	}
	ow := newOwnerWork(p, k, min(ce, max(n, 1)))
	defer putOwnerWork(ow)
	out := make([]byte, 0, size)
	var verdicts [][]Verdict
	msgs := make([][]byte, k)
	for c, off := 0, 0; off < size; c++ {
		m := min(ce, n-c*ce)
		end := off + p.msgSize(m)
		want := chunkHeader{codec: p.codec, phase: phaseDirectScatter, step: uint16(seg), chunk: uint32(c), n: uint32(m)}
		for i, b := range contribs {
			if err := checkContribution(&ow.pk, b[off:end], want); err != nil {
				return nil, nil, &PeerError{Rank: i, Err: err}
			}
			msgs[i] = b[off:end]
		}
		res, v, err := ow.combine(&cfg.Robust, weights, msgs, seg, -1, c)
		if err != nil {
			return nil, nil, fmt.Errorf("mesh: segment %d chunk %d: %w", seg, c, err)
		}
		out = append(out, res...)
		verdicts = append(verdicts, v)
		off = end
	}
	return out, verdicts, nil
}
