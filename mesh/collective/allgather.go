package collective

import "fmt"

// The ring with a compressed codec (CodecQ4, CodecQ2, CodecTopK): partial
// sums are not re-encoded hop by hop. Each member encodes its own
// contribution once (Src + β·ResIn, with error feedback: what the encoding
// lost goes to ResOut), the ring forwards every member's encoded chunks
// k−1 hops unchanged (an all-gather, pipelined per shard and chunk), and
// every member decodes the k contributions of a chunk and sums them in
// rank order, each value scaled by wᵢ/Σw (float32, no fused multiply-add),
// into Dst: the same bytes and the same order everywhere, so every member
// ends with the same bits. A member checks each message before it
// forwards it, so a malformed one is caught by the first receiver, which
// names its left neighbour, the message's origin. Cost per member: k−1
// encoded contributions sent and as many received; memory: the k encoded
// contributions.

// phaseGatherContrib is the chunk-header phase of a gathered contribution;
// the header's step holds its origin rank.
const phaseGatherContrib = 4

// shardRunner is one shard of an AllReduce.
type shardRunner interface {
	run()
	stats() Stats
}

// gatherRun is one shard's gather of compressed contributions: a sending
// goroutine (sendLoop) that encodes this member's contribution and then
// forwards what recvLoop queues, and a receiving one (recvLoop) that
// checks, keeps and queues the others' and sums each chunk once all k are
// in.
type gatherRun struct {
	r         *ring
	s         int
	b         Buffers // this shard's slices
	p         codecParams
	scales    []float32 // per rank, wᵢ/Σw
	ce        int
	n         int             // values of this shard
	off       []int           // chunks+1 offsets of the chunk messages in a contribution
	contrib   [][]byte        // (k) each member's encoded contribution to this shard
	ready     []chan struct{} // per chunk: this member's own encoded
	out       chan []byte
	sent, got Stats
}

func newGatherRun(r *ring, s int, b Buffers, scales []float32) *gatherRun {
	p, ce := r.cfg.params(), r.cfg.ChunkElems
	n := len(b.Dst)
	chunks := (n + ce - 1) / ce
	g := &gatherRun{r: r, s: s, b: b, p: p, scales: scales, ce: ce, n: n, off: make([]int, chunks+1),
		contrib: make([][]byte, r.k), ready: make([]chan struct{}, chunks)}
	for c := range chunks {
		g.off[c+1] = g.off[c] + p.msgSize(min(ce, n-c*ce))
		g.ready[c] = make(chan struct{})
	}
	all := make([]byte, r.k*g.off[chunks])
	for i := range g.contrib {
		g.contrib[i] = all[i*g.off[chunks] : (i+1)*g.off[chunks]]
	}
	// Every contribution's chunk lives in at most one queue or link at a
	// time, so a queue longer than one contribution never fills up (the
	// ring's argument, with k contributions in flight instead of k segments).
	g.out = make(chan []byte, chunks+1)
	return g
}

func (g *gatherRun) stats() Stats {
	st := g.sent
	st.add(g.got)
	return st
}

// chunk returns the value range of chunk c and its message in member i's
// contribution.
func (g *gatherRun) chunk(i, c int) (lo, hi int, msg []byte) {
	lo = c * g.ce
	return lo, min(lo+g.ce, g.n), g.contrib[i][g.off[c]:g.off[c+1]]
}

func (g *gatherRun) header(origin, c, n int) chunkHeader {
	return chunkHeader{codec: g.p.codec, phase: phaseGatherContrib, step: uint16(origin), chunk: uint32(c), n: uint32(n)}
}

func (g *gatherRun) run() { g.r.runPair(g.sendLoop, g.recvLoop) }

// sendLoop encodes and sends this member's contribution, chunk by chunk,
// then forwards what recvLoop queues.
func (g *gatherRun) sendLoop() {
	if err := g.sendOwn(); err != nil {
		g.r.fail(err)
		return
	}
	g.r.forward(g.out, g.xmit)
}

// sendOwn encodes every chunk of this member's contribution into its
// place, releases it for the sum and sends it.
func (g *gatherRun) sendOwn() error {
	pk := packer{p: g.p}
	x := make([]float32, min(g.ce, g.n))
	src := g.b.Src
	if src == nil {
		src = g.b.Dst
	}
	for c := range g.ready {
		lo, hi, msg := g.chunk(g.r.rank, c)
		xc := x[:hi-lo]
		copy(xc, src[lo:hi])
		addDecayed(xc, sub(g.b.ResIn, lo, hi), g.p.decay)
		if _, err := pk.encode(msg[chunkHeaderSize:], xc, sub(g.b.ResOut, lo, hi)); err != nil {
			return fmt.Errorf("mesh: shard %d own values: %w", g.s, err)
		}
		putHeader(msg, g.header(g.r.rank, c, hi-lo))
		close(g.ready[c])
		if err := g.xmit(msg); err != nil {
			return err
		}
	}
	return nil
}

func (g *gatherRun) xmit(msg []byte) error {
	r := g.r
	if err := r.tr.Send(r.ctx, g.s, msg); err != nil {
		return r.transportErr(r.right(), "send", g.s, err)
	}
	g.sent.BytesSent += int64(len(msg))
	g.sent.MsgsSent++
	return nil
}

// recvLoop: at hop j the contribution of member rank−j−1 arrives from the
// left, chunk by chunk; each chunk is checked, kept, and forwarded unless
// the right neighbour is its origin; at the last hop chunk c is complete
// and summed.
func (g *gatherRun) recvLoop() error {
	r, k := g.r, g.r.k
	pk := packer{p: g.p}
	for j := range k - 1 {
		origin := (r.rank - j - 1 + 2*k) % k
		for c := range g.ready {
			lo, hi, keep := g.chunk(origin, c)
			if err := g.recvChunk(&pk, g.header(origin, c, hi-lo), keep); err != nil {
				return err
			}
			if j < k-2 {
				if err := g.push(keep); err != nil {
					return err
				}
				continue
			}
			if err := g.sum(&pk, c); err != nil {
				return err
			}
		}
	}
	close(g.out)
	return nil
}

// recvChunk receives the next chunk, checks it against want (header,
// length, structure, finite table) and copies it into keep.
func (g *gatherRun) recvChunk(pk *packer, want chunkHeader, keep []byte) error {
	r := g.r
	msg, err := r.tr.Recv(r.ctx, g.s)
	if err != nil {
		return r.transportErr(r.left(), "recv", g.s, err)
	}
	g.got.BytesRecv += int64(len(msg))
	g.got.MsgsRecv++
	payload, err := g.p.parse(msg, want, false)
	if err == nil {
		err = pk.read(payload, int(want.n), false, true)
	}
	if err != nil {
		return &PeerError{Rank: r.left(), Err: fmt.Errorf("shard %d: %w", g.s, err)}
	}
	copy(keep, msg)
	return nil
}

func (g *gatherRun) push(msg []byte) error {
	select {
	case g.out <- msg:
		return nil
	case <-g.r.ctx.Done():
		return g.r.transportErr(g.r.right(), "queue", g.s, g.r.ctx.Err())
	}
}

// sum sets chunk c of Dst to Σ scales[i]·decoded_i over the members in
// rank order, once this member's own chunk is encoded.
func (g *gatherRun) sum(pk *packer, c int) error {
	select {
	case <-g.ready[c]:
	case <-g.r.ctx.Done():
		return g.r.transportErr(g.r.right(), "send", g.s, g.r.ctx.Err())
	}
	lo, hi, _ := g.chunk(0, c)
	dst := g.b.Dst[lo:hi]
	clear(dst)
	for i := range g.r.k {
		_, _, msg := g.chunk(i, c)
		payload := msg[chunkHeaderSize:]
		if err := pk.read(payload, hi-lo, false, true); err != nil {
			return fmt.Errorf("mesh: shard %d: member %d's kept chunk %d: %w", g.s, i, c, err)
		}
		pk.apply(dst, payload, g.scales[i], true)
	}
	return nil
}
