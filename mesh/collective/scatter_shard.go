package collective

import (
	"crypto/sha256"
	"encoding/binary"
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
		n := r.segs[j+1] - r.segs[j]
		full := n / ce
		size := full * CodecInt8.msgSize(ce)
		if n%ce != 0 {
			size += CodecInt8.msgSize(n % ce)
		}
		r.segOff[j+1] = r.segOff[j] + size
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
	mlo = r.segOff[j] + c*CodecInt8.msgSize(ce)
	return lo, hi, mlo, mlo + CodecInt8.msgSize(hi-lo)
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
	var qz quantizer
	var t [256]float32
	for d := range o {
		j := (first + d) % o
		if err := r.sc.ctx.Err(); err != nil {
			return nil // the first error is recorded already
		}
		r.sentChunks[j] = make([]Commitment, 0, r.chunks(j))
		for c := range r.chunks(j) {
			lo, hi, mlo, mhi := r.chunk(j, c)
			msg := r.enc[mlo:mhi]
			if err := r.encodeChunk(&qz, &t, x[:hi-lo], lo, hi, msg); err != nil {
				return fmt.Errorf("mesh: shard %d own values: %w", r.s, err)
			}
			putHeader(msg, chunkHeader{codec: CodecInt8, phase: phaseDirectScatter, step: uint16(j), chunk: uint32(c), n: uint32(hi - lo)})
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

// encodeChunk writes the payload of values lo..hi of this member's
// contribution into msg and their quantization error into ResOut.
func (r *scatterShard) encodeChunk(qz *quantizer, t *[256]float32, x []float32, lo, hi int, msg []byte) error {
	src := r.b.Src
	if src == nil {
		src = r.b.Dst
	}
	copy(x, src[lo:hi])
	st := prepScan(x, sub(r.b.ResIn, lo, hi), 1)
	payload := msg[chunkHeaderSize:]
	if err := qz.encodeInt8Scanned(payload, t, x, st); err != nil {
		return err
	}
	if r.b.ResOut != nil {
		residualInt8(r.b.ResOut[lo:hi], x, t, payload[int8TableSize:])
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
func (r *scatterShard) recvChunk(from, lane int, want chunkHeader) ([]byte, error) {
	sc := r.sc
	msg, err := sc.tr.Recv(sc.ctx, from, lane)
	if err != nil {
		return nil, sc.transportErr(from, "recv", lane, err)
	}
	r.count(false, msg)
	if _, err := parseChunk(msg, want); err != nil {
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
	ow := newOwnerWork(sc.k, sc.cfg.ChunkElems)
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
		want := chunkHeader{codec: CodecInt8, phase: phaseDirectScatter, step: uint16(seg), chunk: uint32(c), n: uint32(hi - lo)}
		if err := r.collect(msgs, want, mlo, mhi); err != nil {
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
		decodeInt8Set(r.b.Dst[lo:hi], &ow.t, out[chunkHeaderSize+int8TableSize:])
		r.feedBack(ow, lo, hi)
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
func (r *scatterShard) collect(msgs [][]byte, want chunkHeader, mlo, mhi int) error {
	for i := range msgs {
		if i == r.sc.rank {
			msgs[i] = r.enc[mlo:mhi]
			continue
		}
		m, err := r.recvChunk(i, r.s, want)
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
	var t [256]float32
	for c := range r.chunks(j) {
		lo, hi, _, _ := r.chunk(j, c)
		want := chunkHeader{codec: CodecInt8, phase: phaseDirectGather, step: uint16(j), chunk: uint32(c), n: uint32(hi - lo)}
		msg, err := r.sc.tr.Recv(r.sc.ctx, owner, lane)
		if err != nil {
			return r.sc.transportErr(owner, "recv", lane, err)
		}
		r.count(false, msg)
		if err := decodeResult(r.b.Dst[lo:hi], &t, msg, want); err != nil {
			return &PeerError{Rank: owner, Err: fmt.Errorf("lane %d: %w", lane, err)}
		}
		r.gotChunks[j] = append(r.gotChunks[j], sha256.Sum256(msg))
	}
	r.gotHash[j] = commitChunks(r.gotChunks[j])
	return nil
}

// decodeResult checks an owner's result message against the chunk
// expected and decodes it into dst (len(dst) = want.n), using t for its
// table; ErrBadChunk or ErrNonFinite on malformed bytes.
func decodeResult(dst []float32, t *[256]float32, msg []byte, want chunkHeader) error {
	payload, err := parseChunk(msg, want)
	if err != nil {
		return err
	}
	if err := readTable(t, payload); err != nil {
		return err
	}
	decodeInt8Set(dst, t, payload[int8TableSize:])
	return nil
}

// ownerWork is an owner's scratch space for one chunk at a time.
type ownerWork struct {
	dec [][]float32 // (k, ChunkElems) decoded contributions (trimmed mean only)
	res []float32   // (ChunkElems) the combined values
	out []byte      // the result message
	ws  robustWork
	qz  quantizer
	t   [256]float32
	// gain is Σ weights used / the owner's own weight, 0 if unused.
	gain float64
}

// ownerWorks keeps owner scratch space between attempts: it is k chunks
// of float32 and more, and an attempt runs Shards owners.
var ownerWorks sync.Pool

// newOwnerWork returns scratch space for k members and chunks of up to
// chunkElems values; putOwnerWork gives it back.
func newOwnerWork(k, chunkElems int) *ownerWork {
	ow, _ := ownerWorks.Get().(*ownerWork)
	if ow == nil {
		ow = &ownerWork{}
	}
	ow.grow(chunkElems)
	return ow
}

// grow makes room for chunks of chunkElems values.
func (ow *ownerWork) grow(chunkElems int) {
	if len(ow.res) < chunkElems {
		ow.res, ow.out = make([]float32, chunkElems), make([]byte, CodecInt8.msgSize(chunkElems))
		ow.dec = ow.dec[:0]
	}
}

func putOwnerWork(ow *ownerWork) { ownerWorks.Put(ow) }

// combine is the robust rule over chunk c of segment seg: msgs are the k
// members' parsed chunk messages (same header), the result is the owner's
// message (valid until the next call; ow.t holds its table) and one Verdict
// per member. rank is the owner's (for ow.gain; -1 for an auditor). A
// contribution with a non-finite table entry in use is rejected, not an
// error. It only fails if the result does not encode.
func (ow *ownerWork) combine(rc *RobustConfig, weights []float32, msgs [][]byte, seg, rank, c int) ([]byte, []Verdict, error) {
	n := int(binary.BigEndian.Uint32(msgs[0][8:]))
	v := make([]Verdict, len(msgs))
	var st chunkStats
	if rc.Rule == RuleCenteredClip {
		st, _ = robustMeanCoded(&ow.ws, rc, weights, msgs, ow.res[:n], v)
	} else {
		for len(ow.dec) < len(msgs) {
			ow.dec = append(ow.dec, make([]float32, len(ow.res)))
		}
		xs := ow.dec[:len(msgs)]
		for i, m := range msgs {
			xs[i] = xs[i][:n]
			decodeRaw(xs[i], m[chunkHeaderSize:])
		}
		robustMean(&ow.ws, rc, weights, xs, ow.res[:n], v)
		st = scanChunk(ow.res[:n])
	}
	ow.gain = 0
	if rank >= 0 && ow.ws.w[rank] > 0 { // an auditor (-1) feeds nothing back
		own := ow.ws.w[rank]
		var total float64
		for _, i := range ow.ws.active {
			total += ow.ws.w[i]
		}
		ow.gain = total / own
	}
	out := ow.out[:CodecInt8.msgSize(n)]
	putHeader(out, chunkHeader{codec: CodecInt8, phase: phaseDirectGather, step: uint16(seg), chunk: uint32(c), n: uint32(n)})
	if err := ow.qz.encodeInt8Scanned(out[chunkHeaderSize:], &ow.t, ow.res[:n], st); err != nil {
		return nil, nil, err
	}
	return out, v, nil
}

// decodeRaw decodes an int8 payload into x whatever its table holds
// (non-finite entries included: the rule rejects such contributions).
func decodeRaw(x []float32, payload []byte) {
	var t [256]float32
	rawTable(&t, payload)
	decodeInt8Set(x, &t, payload[int8TableSize:int8TableSize+len(x)])
}
