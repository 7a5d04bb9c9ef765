package collective

import (
	"crypto/sha256"
	"fmt"
	"sync"
)

// scatterShard is one shard of a ScatterAllReduce. Its goroutines: encode
// (this member's contributions, own segment first), one sender per other
// owner, the owner unless this member is a client (receives its segment's
// contributions, combines them, sends the result to everyone) and one
// gatherer per other owner (receives that owner's results). Segments are
// indexed by j, 0 ≤ j < len(owners); segment j's owner is owners[j].
//
// No deadlock: encode never waits on anyone; a sender waits only for its
// owner, which reads every member's lane in turn; an owner sending a result
// waits only for that member's gatherer of this owner, which waits for
// nothing else. So whoever a receive waits for is the one at fault when it
// times out (see blame).
type scatterShard struct {
	sc       *scatter
	s        int
	b        Buffers // this shard's slices
	segs     []int   // o+1 segment boundaries in b.Dst (o owners)
	enc      []byte  // every chunk message of every segment, segment order
	segOff   []int   // o+1 offsets of the segments' messages in enc
	ready    []chan struct{}
	sentHash []Commitment // per segment: what this member sent
	gotHash  []Commitment // per segment: the result this member received
	// Per segment and chunk: the same, chunk by chunk.
	sentChunks, gotChunks [][]Commitment
	sentNorms             [][]float32 // per segment and chunk: the norm an owner finds (MessageNorm)
	owned                 *SegmentReport

	mu         sync.Mutex
	sent, recv Stats
}

func newScatterShard(sc *scatter, s int, b Buffers) *scatterShard {
	o, ce := len(sc.owners), sc.cfg.ChunkElems
	r := &scatterShard{sc: sc, s: s, b: b, segs: make([]int, o+1), segOff: make([]int, o+1),
		ready: make([]chan struct{}, o), sentHash: make([]Commitment, o), gotHash: make([]Commitment, o)}
	for j := range r.segs {
		r.segs[j], _ = span(len(b.Dst), o, j)
	}
	for j := range o {
		r.segOff[j+1] = r.segOff[j] + sc.p.segmentSize(r.segs[j+1]-r.segs[j], ce)
		r.ready[j] = make(chan struct{})
	}
	r.enc = make([]byte, r.segOff[o])
	r.sentChunks, r.gotChunks = make([][]Commitment, o), make([][]Commitment, o)
	r.sentNorms = make([][]float32, o)
	return r
}

// chunks is the number of chunks of segment j.
func (r *scatterShard) chunks(j int) int {
	ce := r.sc.cfg.ChunkElems
	return (r.segs[j+1] - r.segs[j] + ce - 1) / ce
}

// chunk returns the value range of chunk c of segment j and the range of its
// message in enc.
func (r *scatterShard) chunk(j, c int) (lo, hi, mlo, mhi int) {
	ce := r.sc.cfg.ChunkElems
	lo = r.segs[j] + c*ce
	hi = min(lo+ce, r.segs[j+1])
	mlo = r.segOff[j] + c*r.sc.p.msgSize(ce)
	return lo, hi, mlo, mlo + r.sc.p.msgSize(hi-lo)
}

func (r *scatterShard) count(sent bool, msg []byte) {
	r.mu.Lock()
	if sent {
		r.sent.BytesSent += int64(len(msg))
		r.sent.MsgsSent++
	} else {
		r.recv.BytesRecv += int64(len(msg))
		r.recv.MsgsRecv++
	}
	r.mu.Unlock()
}

func (r *scatterShard) stats() Stats {
	st := r.sent
	st.add(r.recv)
	return st
}

func (r *scatterShard) run() {
	var wg sync.WaitGroup
	wg.Go(r.guard(r.encode))
	for j := range r.sc.owners {
		if j != r.sc.seg {
			wg.Go(r.guard(func() error { return r.sendTo(j) }))
		}
	}
	if r.sc.seg >= 0 {
		wg.Go(r.guard(r.own))
	}
	for j := range r.sc.owners {
		if j != r.sc.seg {
			wg.Go(r.guard(func() error { return r.gatherFrom(j) }))
		}
	}
	wg.Wait()
}

// guard turns a step's error into the attempt's failure.
func (r *scatterShard) guard(f func() error) func() {
	return func() {
		if err := f(); err != nil {
			r.sc.fail(err)
		}
	}
}

// encode quantizes this member's contribution (Src + ResIn) to every
// segment once, own segment first (a client starts at segment rank mod o,
// so that the clients' first sends go to different owners), and releases
// each segment's sender.
func (r *scatterShard) encode() error {
	o, first := len(r.sc.owners), r.sc.seg
	if first < 0 {
		first = r.sc.rank % o
	}
	x := make([]float32, min(r.sc.cfg.ChunkElems, len(r.b.Dst)))
	e := &memberEncoder{pk: packer{p: r.sc.p}}
	for d := range o {
		j := (first + d) % o
		if err := r.sc.ctx.Err(); err != nil {
			return nil // the first error is recorded already
		}
		r.sentChunks[j] = make([]Commitment, 0, r.chunks(j))
		for c := range r.chunks(j) {
			lo, hi, mlo, mhi := r.chunk(j, c)
			msg := r.enc[mlo:mhi]
			if err := r.encodeChunk(e, x[:hi-lo], lo, hi, msg); err != nil {
				return fmt.Errorf("mesh: shard %d own values: %w", r.s, err)
			}
			putHeader(msg, chunkHeader{codec: r.sc.p.codec, phase: phaseDirectScatter, step: uint16(j), chunk: uint32(c), n: uint32(hi - lo)})
			r.sentChunks[j] = append(r.sentChunks[j], sha256.Sum256(msg))
		}
		r.sentHash[j] = commitChunks(r.sentChunks[j])
		close(r.ready[j])
	}
	// The norms an owner will state (ScatterResult.SentNorms), while the
	// segments are on their way: not before the first send.
	for j := range o {
		r.sentNorms[j] = make([]float32, r.chunks(j))
		for c := range r.sentNorms[j] {
			_, _, mlo, mhi := r.chunk(j, c)
			r.sentNorms[j][c] = messageNorm(r.enc[mlo:mhi])
		}
	}
	return nil
}

// memberEncoder is the scratch space of a member's encoder.
type memberEncoder struct {
	qz quantizer
	t  [256]float32
	pk packer
}

// encodeChunk writes the payload of values lo..hi of this member's
// contribution (Src + ResIn; Src + β·ResIn for the compressed codecs) into
// msg and their encoding error into ResOut.
func (r *scatterShard) encodeChunk(e *memberEncoder, x []float32, lo, hi int, msg []byte) error {
	src := r.b.Src
	if src == nil {
		src = r.b.Dst
	}
	copy(x, src[lo:hi])
	payload := msg[chunkHeaderSize:]
	resIn, resOut := sub(r.b.ResIn, lo, hi), sub(r.b.ResOut, lo, hi)
	if r.sc.p.codec != CodecInt8 {
		addDecayed(x, resIn, r.sc.p.decay)
		_, err := e.pk.encode(payload, x, resOut)
		return err
	}
	st := prepScan(x, resIn, 1)
	if err := e.qz.encodeInt8Scanned(payload, &e.t, x, st); err != nil {
		return err
	}
	if resOut != nil {
		residualInt8(resOut, x, &e.t, payload[int8TableSize:])
	}
	return nil
}

// waitReady waits until segment j is encoded; false if the attempt ended.
func (r *scatterShard) waitReady(j int) bool {
	select {
	case <-r.ready[j]:
		return true
	case <-r.sc.ctx.Done():
		return false
	}
}

// sendTo sends this member's contribution to segment j to its owner.
func (r *scatterShard) sendTo(j int) error {
	if !r.waitReady(j) {
		return nil
	}
	owner := r.sc.owners[j]
	for c := range r.chunks(j) {
		_, _, mlo, mhi := r.chunk(j, c)
		msg := r.enc[mlo:mhi]
		if err := r.sc.tr.Send(r.sc.ctx, owner, r.s, msg); err != nil {
			return r.sc.transportErr(owner, "send", r.s, err)
		}
		r.count(true, msg)
	}
	return nil
}

// recvChunk receives the next message from member from on lane and checks
// it is the chunk expected.
func (r *scatterShard) recvChunk(from, lane int, want chunkHeader, pk *packer) ([]byte, error) {
	sc := r.sc
	msg, err := sc.tr.Recv(sc.ctx, from, lane)
	if err != nil {
		return nil, sc.transportErr(from, "recv", lane, err)
	}
	r.count(false, msg)
	if err := checkContribution(pk, msg, want); err != nil {
		return nil, &PeerError{Rank: from, Err: fmt.Errorf("lane %d: %w", lane, err)}
	}
	return msg, nil
}

// own receives every member's contribution to this member's segment chunk
// by chunk, combines them and sends the result's bytes to every member.
func (r *scatterShard) own() error {
	sc, rank, seg := r.sc, r.sc.rank, r.sc.seg
	if !r.waitReady(seg) {
		return nil
	}
	recv := make([][]Commitment, sc.k) // per member, its chunks' hashes (own: sentChunks)
	ow := newOwnerWork(sc.p, sc.k, sc.cfg.ChunkElems)
	defer putOwnerWork(ow)
	msgs := make([][]byte, sc.k)
	rep := &SegmentReport{Shard: r.s, Segment: seg}
	if sc.cfg.Audit {
		rep.Inputs = make([][]byte, sc.k)
		for i := range rep.Inputs {
			rep.Inputs[i] = make([]byte, 0, r.segOff[seg+1]-r.segOff[seg])
		}
	}
	for c := range r.chunks(seg) {
		lo, hi, mlo, mhi := r.chunk(seg, c)
		want := chunkHeader{codec: sc.p.codec, phase: phaseDirectScatter, step: uint16(seg), chunk: uint32(c), n: uint32(hi - lo)}
		if err := r.collect(msgs, want, mlo, mhi, &ow.pk); err != nil {
			return err
		}
		for i, m := range msgs {
			if i != rank { // this member's own: sentChunks[seg], from encode
				recv[i] = append(recv[i], sha256.Sum256(m))
			}
			if rep.Inputs != nil {
				rep.Inputs[i] = append(rep.Inputs[i], m...)
			}
		}
		out, v, err := ow.combine(&sc.cfg.Robust, sc.weights, msgs, seg, rank, c)
		if err != nil {
			return fmt.Errorf("mesh: shard %d segment %d: %w", r.s, seg, err)
		}
		rep.Verdicts = append(rep.Verdicts, v)
		rep.MedianNorms = append(rep.MedianNorms, float32(ow.ws.medianNorm))
		r.gotChunks[seg] = append(r.gotChunks[seg], sha256.Sum256(out))
		if err := ow.decodeOwn(r.b.Dst[lo:hi], out); err != nil {
			return fmt.Errorf("mesh: shard %d segment %d: own result: %w", r.s, seg, err)
		}
		if sc.cfg.ResultFeedback == FeedbackOn {
			r.feedBack(ow, lo, hi)
		}
		if err := r.broadcast(out); err != nil {
			return err
		}
	}
	rep.Received = make([]Commitment, sc.k)
	for i, hs := range recv {
		rep.Received[i] = commitChunks(hs)
	}
	rep.Received[rank] = r.sentHash[seg]
	rep.Result = commitChunks(r.gotChunks[seg])
	r.gotHash[seg] = rep.Result
	r.owned = rep
	return nil
}

// feedBack adds to ResOut what quantizing this owner's result lost, in
// units of its own contribution (× Σw / own weight, the gain of the mean
// when nothing is clipped), so that error feedback also covers the result.
func (r *scatterShard) feedBack(ow *ownerWork, lo, hi int) {
	if r.b.ResOut == nil || ow.gain == 0 {
		return
	}
	g := float32(ow.gain)
	res, dst, out := ow.res[:hi-lo], r.b.Dst[lo:hi], r.b.ResOut[lo:hi]
	for t := range out {
		out[t] += float32(float32(res[t]-dst[t]) * g)
	}
}

// collect fills msgs with chunk want of every member's contribution: its
// own from enc[mlo:mhi], the others' from their lanes.
func (r *scatterShard) collect(msgs [][]byte, want chunkHeader, mlo, mhi int, pk *packer) error {
	for i := range msgs {
		if i == r.sc.rank {
			msgs[i] = r.enc[mlo:mhi]
			continue
		}
		m, err := r.recvChunk(i, r.s, want, pk)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	return nil
}

// broadcast sends an owner's result message to every other member.
func (r *scatterShard) broadcast(msg []byte) error {
	lane := r.sc.cfg.Shards + r.s
	for i := range r.sc.k {
		if i == r.sc.rank {
			continue
		}
		if err := r.sc.tr.Send(r.sc.ctx, i, lane, msg); err != nil {
			return r.sc.transportErr(i, "send", lane, err)
		}
		r.count(true, msg)
	}
	return nil
}

// gatherFrom receives segment j's results from its owner into Dst.
func (r *scatterShard) gatherFrom(j int) error {
	lane, owner := r.sc.cfg.Shards+r.s, r.sc.owners[j]
	rd := &resultDecoder{pk: packer{p: r.sc.p}}
	for c := range r.chunks(j) {
		lo, hi, _, _ := r.chunk(j, c)
		want := chunkHeader{codec: r.sc.p.codec, phase: phaseDirectGather, step: uint16(j), chunk: uint32(c), n: uint32(hi - lo)}
		msg, err := r.sc.tr.Recv(r.sc.ctx, owner, lane)
		if err != nil {
			return r.sc.transportErr(owner, "recv", lane, err)
		}
		r.count(false, msg)
		if err := rd.decode(r.b.Dst[lo:hi], msg, want); err != nil {
			return &PeerError{Rank: owner, Err: fmt.Errorf("lane %d: %w", lane, err)}
		}
		r.gotChunks[j] = append(r.gotChunks[j], sha256.Sum256(msg))
	}
	r.gotHash[j] = commitChunks(r.gotChunks[j])
	return nil
}

// resultDecoder decodes owners' results; one per goroutine.
type resultDecoder struct {
	t  [256]float32
	pk packer
}

// decode checks an owner's result message against the chunk expected and
// decodes it into dst (len(dst) = want.n); ErrBadChunk or ErrNonFinite on
// malformed bytes (a non-finite table entry, used or not, included).
func (rd *resultDecoder) decode(dst []float32, msg []byte, want chunkHeader) error {
	payload, err := rd.pk.p.parse(msg, want, true)
	if err != nil {
		return err
	}
	if rd.pk.p.codec != CodecInt8 {
		if err := rd.pk.read(payload, len(dst), true, true); err != nil {
			return err
		}
		rd.pk.apply(dst, payload, 1, false)
		return nil
	}
	if err := readTable(&rd.t, payload); err != nil {
		return err
	}
	decodeInt8Set(dst, &rd.t, payload[int8TableSize:])
	return nil
}

// checkContribution checks a member's contribution against the chunk
// expected: header, length and, for the compressed codecs, the payload's
// structure (a top-k message's indices, the padding); its table may hold
// anything (the rule rejects the contributions that use a non-finite
// entry). pk is scratch space (its table and entries are overwritten).
func checkContribution(pk *packer, msg []byte, want chunkHeader) error {
	payload, err := pk.p.parse(msg, want, false)
	if err != nil || !pk.p.codec.compressed() {
		return err
	}
	return pk.read(payload, int(want.n), false, false)
}
