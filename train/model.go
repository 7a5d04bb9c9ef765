package train

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/kernels"
)

// model is the Llama network with its parameters, gradients and the
// activations of one (B, T) batch, all allocated once. Forward is a flat list
// of layer calls; backward runs them in reverse, accumulating parameter
// gradients with +=, like llm.c.
//
// The batch is cut into lanes of whole rows that run forward and backward at
// the same time on their own activations, each accumulating its own gradient
// (lane 0 straight into grads); backward then adds the other lanes' gradients
// into grads in lane order. On two cores this keeps both busy for the whole
// step instead of waking a second thread for every product (the fork/join of
// each ≈ 0.3 ms product cost up to half the second core). The number of
// lanes depends on the shape only (laneCount), never on GOMAXPROCS, so a step
// gives the same bits on every machine with the same kernels.
type model struct {
	cfg    Config
	B, T   int
	params []float32 // one allocation carved into the tensors of cfg.Layout()
	grads  []float32 // same layout as params
	p, g   weights   // views into params and grads
	lanes  []*lane
	cos    []float32 // (T, hd/2) RoPE tables
	sin    []float32
	fresh  bool // grads is logically zero: the next backward writes it (zeroGrads)
	// ss is Σ grads² as the last backward's reduction left it, when ssValid.
	ss      float64
	ssValid bool
	// red cuts the flat gradient into the ranges the lanes are reduced by, in
	// offset order: one per matmul weight (the lanes reduce it inside their
	// backward, see laneDone) and the embedding and norm gains between them
	// (reduced after the lanes). redLM and redLayers point at the matmul ones.
	red       []gradRange
	redLM     *gradRange
	redLayers []layerRanges
	// ready holds the matmul ranges all lanes have written and none has yet
	// reduced, in the order they became ready (ready[readyNext:] are left).
	readyMu   sync.Mutex
	ready     []*gradRange
	readyNext int
}

// gradRange is a range of the flat gradient reduced over the lanes as a unit.
type gradRange struct {
	off, n  int
	byLanes bool    // a matmul dW, reduced by a lane during the backward
	done    int     // lanes that have written it in this backward (under readyMu)
	reduced bool    // reduced in this backward
	ss      float64 // Σ of its squares after the reduction
}

// layerRanges are the gradRanges of one block's matmul weights.
type layerRanges struct{ qkv, o, gu, down *gradRange }

// lane is one slice of the batch: B rows with their activations and, for
// lanes after the first, a gradient buffer of their own.
type lane struct {
	B        int
	a        acts
	grads    []float32     // nil for lane 0, which accumulates into the model's
	g        weights       // views into the gradient this lane accumulates into
	ce, obj  float64       // sums over the lane's tokens of the last forward
	gemm     time.Duration // time spent in kernels.Sgemm since the last reset
	timeGEMM bool
	w        kernels.Workers // the lane's share of GOMAXPROCS, set by eachLane
	dwBeta   float32         // 1: backward adds into the gradient; 0: it writes it
}

// laneCount is the number of lanes for batches of B rows of T tokens and n
// parameters: two when the rows split evenly and each lane keeps at least 64
// tokens (enough rows for the products to stay efficient), and the extra
// gradient buffer stays under 1 GiB; else one.
func laneCount(B, T int, n int64) int {
	if B%2 == 0 && B*T >= 128 && n <= 1<<28 {
		return 2
	}
	return 1
}

// layerW are the views of one block's tensors (fused where adjacent in memory).
type layerW struct {
	ln1  []float32 // (C)
	qkv  []float32 // (qkvDim, C): q_proj | k_proj | v_proj
	o    []float32 // (C, H·hd)
	ln2  []float32 // (C)
	gu   []float32 // (2F, C): gate_proj | up_proj
	down []float32 // (C, F)
}

type weights struct {
	wte    []float32 // (V, C)
	layers []layerW
	lnf    []float32 // (C)
	lm     []float32 // (V, C)
}

// acts are the activations kept for the backward pass and its scratch buffers.
type acts struct {
	resid        [][]float32 // L+1 × (N, C): input of each block, then the final residual
	mid          [][]float32 // L × (N, C): residual after attention
	ln1, ln2     [][]float32 // L × (N, C)
	rstd1, rstd2 [][]float32 // L × (N)
	qkv          [][]float32 // L × (N, qkvDim), q and k after RoPE
	att          [][]float32 // L × (N, H·hd)
	lse          [][]float32 // L × (B, H, T)
	gu           [][]float32 // L × (N, 2F)
	h            [][]float32 // L × (N, F)
	lnf, rstdf   []float32   // (N, C), (N)
	logits       []float32   // (N, V), overwritten by dlogits
	losses, ce   []float32   // (N)
	dresid, dln  []float32   // (N, C)
	dqkv         []float32   // (N, qkvDim)
	datt         []float32   // (N, H·hd)
	dh           []float32   // (N, F)
	dgu          []float32   // (N, 2F)
}

// maxCPUFloats bounds the float32 values (parameters, gradients, AdamW moments
// and activations) a CPU model may allocate: 32 GiB. Larger configurations are
// refused with an error instead of failing in the allocator.
const maxCPUFloats = 1 << 33

// actFloats estimates the activation floats of a model for B×T tokens.
func actFloats(c Config, B, T int) float64 {
	N := float64(B * T)
	C, F, V, W := float64(c.Dim), float64(c.FFN), float64(c.Vocab), float64(c.qkvDim())
	perLayer := N * (6*C + W + 3*F + 2) // resid, mid, ln1, ln2, att (≤C), qkv, gu, h
	return float64(c.Layers)*perLayer + N*(V+4*C+2*W+3*F)
}

func (c Config) qkvDim() int { return (c.Heads + 2*c.KVHeads) * c.HeadDim() }

// newModel allocates a model for batches of B rows of T tokens. Parameters are
// zero; call initParams or copy them in.
func newModel(cfg Config, B, T int) (*model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newModelLanes(cfg, B, T, laneCount(B, T, cfg.NumParams()))
}

// newModelLanes is newModel with an explicit number of lanes (it must divide B).
func newModelLanes(cfg Config, B, T, lanes int) (*model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if B < 1 || T < 1 || T > cfg.SeqLen {
		return nil, fmt.Errorf("%w: batch %d × seq %d (seq_len %d)", ErrConfig, B, T, cfg.SeqLen)
	}
	if lanes < 1 || B%lanes != 0 {
		return nil, fmt.Errorf("%w: %d lanes do not divide batch %d", ErrConfig, lanes, B)
	}
	n := cfg.NumParams()
	if need := float64(3+lanes)*float64(n) + actFloats(cfg, B, T); need > maxCPUFloats {
		return nil, fmt.Errorf("%w: %d parameters with batch %d×%d need %.0f GiB: too many for the CPU engine (limit %d GiB)",
			ErrConfig, n, B, T, need*4/(1<<30), maxCPUFloats*4>>30)
	}
	m := &model{cfg: cfg, B: B, T: T, params: make([]float32, n), grads: make([]float32, n)}
	m.p, m.g = carve(cfg, m.params), carve(cfg, m.grads)
	for k := 0; k < lanes; k++ {
		l := &lane{B: B / lanes, g: m.g}
		if k > 0 {
			l.grads = make([]float32, n)
			l.g = carve(cfg, l.grads)
		}
		l.a = allocActs(cfg, l.B, T)
		m.lanes = append(m.lanes, l)
	}
	m.initRanges()
	hd := cfg.HeadDim()
	m.cos, m.sin = make([]float32, T*hd/2), make([]float32, T*hd/2)
	kernels.RoPETables(m.cos, m.sin, T, hd, cfg.RopeTheta)
	return m, nil
}

// initRanges cuts the flat gradient into m.red: each matmul weight (q/k/v and
// gate/up fused, as the products write them) is one range the lanes reduce,
// everything else is gathered into the ranges between them.
func (m *model) initRanges() {
	lay := m.cfg.Layout()
	type span struct {
		off, n  int
		byLanes bool
	}
	var spans []span
	add := func(off, n int, byLanes bool) {
		if k := len(spans) - 1; !byLanes && k >= 0 && !spans[k].byLanes && spans[k].off+spans[k].n == off {
			spans[k].n += n // merge neighbouring small tensors
			return
		}
		spans = append(spans, span{off, n, byLanes})
	}
	layers := make([][4]int, m.cfg.Layers) // span indexes of qkv, o, gu, down
	add(lay[0].Offset, lay[0].Size(), false)
	for l := 0; l < m.cfg.Layers; l++ {
		i := 1 + 9*l
		add(lay[i].Offset, lay[i].Size(), false)
		layers[l][0] = len(spans)
		add(lay[i+1].Offset, lay[i+4].Offset-lay[i+1].Offset, true)
		layers[l][1] = len(spans)
		add(lay[i+4].Offset, lay[i+4].Size(), true)
		add(lay[i+5].Offset, lay[i+5].Size(), false)
		layers[l][2] = len(spans)
		add(lay[i+6].Offset, lay[i+8].Offset-lay[i+6].Offset, true)
		layers[l][3] = len(spans)
		add(lay[i+8].Offset, lay[i+8].Size(), true)
	}
	add(lay[len(lay)-2].Offset, lay[len(lay)-2].Size(), false)
	lm := len(spans)
	add(lay[len(lay)-1].Offset, lay[len(lay)-1].Size(), true)
	m.red = make([]gradRange, len(spans))
	for i, sp := range spans {
		m.red[i].off, m.red[i].n, m.red[i].byLanes = sp.off, sp.n, sp.byLanes
	}
	m.redLM = &m.red[lm]
	m.redLayers = make([]layerRanges, m.cfg.Layers)
	for l, ix := range layers {
		m.redLayers[l] = layerRanges{qkv: &m.red[ix[0]], o: &m.red[ix[1]], gu: &m.red[ix[2]], down: &m.red[ix[3]]}
	}
}

// carve returns views of the tensors of flat (laid out as cfg.Layout()).
func carve(cfg Config, flat []float32) weights {
	lay := cfg.Layout()
	view := func(i, n int) []float32 { return flat[lay[i].Offset : lay[i].Offset+n] }
	C, F := cfg.Dim, cfg.FFN
	w := weights{wte: view(0, lay[0].Size())}
	for l := 0; l < cfg.Layers; l++ {
		i := 1 + 9*l
		w.layers = append(w.layers, layerW{
			ln1: view(i, C), qkv: view(i+1, cfg.qkvDim()*C), o: view(i+4, lay[i+4].Size()),
			ln2: view(i+5, C), gu: view(i+6, 2*F*C), down: view(i+8, C*F),
		})
	}
	w.lnf = view(len(lay)-2, C)
	w.lm = view(len(lay)-1, lay[len(lay)-1].Size())
	return w
}

// allocActs allocates the activations of B rows of T tokens.
func allocActs(c Config, B, T int) acts {
	L, N := c.Layers, B*T
	C, F, Q, W := c.Dim, c.FFN, c.Heads*c.HeadDim(), c.qkvDim()
	f := func(n int) []float32 { return make([]float32, n) }
	fl := func(k, n int) [][]float32 {
		s := make([][]float32, k)
		for i := range s {
			s[i] = f(n)
		}
		return s
	}
	return acts{
		resid: fl(L+1, N*C), mid: fl(L, N*C), ln1: fl(L, N*C), ln2: fl(L, N*C),
		rstd1: fl(L, N), rstd2: fl(L, N), qkv: fl(L, N*W), att: fl(L, N*Q),
		lse: fl(L, B*c.Heads*T), gu: fl(L, N*2*F), h: fl(L, N*F),
		lnf: f(N * C), rstdf: f(N), logits: f(N * c.Vocab), losses: f(N), ce: f(N),
		dresid: f(N * C), dln: f(N * C), dqkv: f(N * W), datt: f(N * Q), dh: f(N * F), dgu: f(N * 2 * F),
	}
}

// matmul: out (N, OC) = inp (N, IC) · wᵀ + beta·out, w (OC, IC).
func (m *lane) matmul(out, inp, w []float32, N, IC, OC int, beta float32) {
	m.sgemm(false, true, N, OC, IC, inp, IC, w, IC, beta, out, OC)
}

// matmulBackward: dinp (N, IC) = dout (N, OC) · w (overwritten);
// dw (OC, IC) += doutᵀ · inp.
func (m *lane) matmulBackward(md *model, r *gradRange, dinp, dw, dout, inp, w []float32, N, IC, OC int) {
	if dinp != nil {
		m.sgemm(false, false, N, IC, OC, dout, OC, w, IC, 0, dinp, IC)
	}
	m.sgemm(true, false, OC, IC, N, dout, OC, inp, IC, m.dwBeta, dw, IC)
	md.laneDone(r, m.w)
}

func (m *lane) sgemm(ta, tb bool, M, N, K int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !m.timeGEMM {
		m.w.Sgemm(ta, tb, M, N, K, 1, a, lda, b, ldb, beta, c, ldc)
		return
	}
	t0 := time.Now()
	m.w.Sgemm(ta, tb, M, N, K, 1, a, lda, b, ldb, beta, c, ldc)
	m.gemm += time.Since(t0)
}

// forward runs the model on inputs (B, T) against targets (B, T) and returns
// the mean cross-entropy and the mean training objective (cross-entropy plus
// max-z-loss). With lossScale > 0 it also leaves dlogits = lossScale·∂(Σ
// objective)/∂logits in the lanes' logits for backward; with 0 it skips that.
func (m *model) forward(inputs, targets []int32, lossScale float32) (ce, obj float64) {
	rows := len(inputs) / len(m.lanes)
	m.eachLane(func(k int, l *lane) {
		l.ce, l.obj = l.forward(m, inputs[k*rows:(k+1)*rows], targets[k*rows:(k+1)*rows], lossScale)
	})
	for _, l := range m.lanes { // in lane order: the same sums on every machine
		ce += l.ce
		obj += l.obj
	}
	N := float64(m.B * m.T)
	return ce / N, obj / N
}

// backward accumulates into m.grads the gradient of the objective whose
// dlogits the last forward (with lossScale > 0) left in the lanes' logits —
// or, after zeroGrads, writes it there. The lanes after the first always
// write their own buffers, which are added into m.grads in lane order, range
// by range: a matmul weight's range by whichever lane next finishes a
// product once all lanes have written it (laneDone), which mostly is the lane
// ahead, so the reduction fills its wait instead of following the lanes; the
// rest after the lanes, on all cores. Every element gets the same float32
// additions in the same order whichever goroutine does them, and Σ grads²
// (for clipping) is summed over the ranges in offset order.
func (m *model) backward(inputs []int32) {
	for i := range m.red {
		m.red[i].done, m.red[i].reduced = 0, false
	}
	m.ready, m.readyNext = m.ready[:0], 0
	rows := len(inputs) / len(m.lanes)
	m.eachLane(func(k int, l *lane) { l.backward(m, inputs[k*rows:(k+1)*rows], k > 0 || m.fresh) })
	m.fresh = false
	m.ssValid = len(m.lanes) > 1
	if !m.ssValid {
		return
	}
	m.ss = 0
	for i := range m.red { // in offset order: the same sum on every machine
		r := &m.red[i]
		if r.byLanes && r.done != len(m.lanes) {
			panic("train: a matmul gradient was not written by every lane")
		}
		if !r.reduced {
			m.reduceRange(r, kernels.Workers(0))
		}
		m.ss += r.ss
	}
}

// laneDone records that one lane has written its part of the gradient range
// r, and reduces, on the lane's goroutine budget w, the oldest range all
// lanes had written before (if any).
func (m *model) laneDone(r *gradRange, w kernels.Workers) {
	if len(m.lanes) == 1 {
		return
	}
	var next *gradRange
	m.readyMu.Lock()
	if m.readyNext < len(m.ready) {
		next = m.ready[m.readyNext]
		m.readyNext++
	}
	if r.done++; r.done == len(m.lanes) {
		m.ready = append(m.ready, r)
	}
	m.readyMu.Unlock()
	if next != nil {
		m.reduceRange(next, w)
	}
}

// reduceRange adds the lanes' parts of r into m.grads in lane order and keeps
// the sum of squares of the result in r.ss.
func (m *model) reduceRange(r *gradRange, w kernels.Workers) {
	dst := m.grads[r.off : r.off+r.n]
	last := len(m.lanes) - 1
	for k := 1; k < last; k++ {
		w.Add(dst, m.lanes[k].grads[r.off:r.off+r.n])
	}
	r.ss = w.AddSumSquares(dst, m.lanes[last].grads[r.off:r.off+r.n])
	r.reduced = true
}

// gradSumSquares returns Σ grads²: from the last backward's reduction when
// it computed it, else by a pass over the gradient.
func (m *model) gradSumSquares() float64 {
	if m.ssValid {
		return m.ss
	}
	return kernels.SumSquares(m.grads)
}

// zeroGrads makes the gradient zero for the next backward without a pass
// over memory: that backward writes m.grads instead of adding to it.
func (m *model) zeroGrads() { m.fresh, m.ssValid = true, false }

// eachLane runs f on every lane at once, lane 0 on the calling goroutine, and
// returns when all are done.
func (m *model) eachLane(f func(k int, l *lane)) {
	w := kernels.Workers(max(1, runtime.GOMAXPROCS(0)/len(m.lanes)))
	for _, l := range m.lanes {
		l.w = w
	}
	var wg sync.WaitGroup
	for k, l := range m.lanes[1:] {
		wg.Go(func() { f(k+1, l) })
	}
	f(0, m.lanes[0])
	wg.Wait()
}

// setTiming turns the lanes' Sgemm timers on or off and resets them.
func (m *model) setTiming(on bool) {
	for _, l := range m.lanes {
		l.timeGEMM, l.gemm = on, 0
	}
}

// gemmTime is the lanes' mean time in Sgemm since setTiming: the wall time
// the products took, as the lanes run side by side.
func (m *model) gemmTime() time.Duration {
	var d time.Duration
	for _, l := range m.lanes {
		d += l.gemm
	}
	return d / time.Duration(len(m.lanes))
}

// logits returns the logits of row n (of B·T) of the last forward pass
// with lossScale 0.
func (m *model) logits(n int) []float32 {
	l := m.lanes[n/(m.T*m.lanes[0].B)]
	n %= m.T * l.B
	V := m.cfg.Vocab
	return l.a.logits[n*V : (n+1)*V]
}

// forward runs the lane on its rows and returns the sums of cross-entropy
// and objective over its tokens.
func (m *lane) forward(md *model, inputs, targets []int32, lossScale float32) (ce, obj float64) {
	c, a, N := md.cfg, &m.a, m.B*md.T
	C, F, H, KVH, hd, W := c.Dim, c.FFN, c.Heads, c.KVHeads, c.HeadDim(), c.qkvDim()
	for n, tok := range inputs { // embedding: resid0 (N, C)
		copy(a.resid[0][n*C:(n+1)*C], md.p.wte[int(tok)*C:])
	}
	eps := float32(c.NormEps)
	for l, w := range md.p.layers {
		m.w.RMSNormForward(a.ln1[l], a.rstd1[l], a.resid[l], w.ln1, N, C, eps)
		m.matmul(a.qkv[l], a.ln1[l], w.qkv, N, C, W, 0)
		m.w.RoPEForward(a.qkv[l], md.cos, md.sin, m.B, md.T, H+KVH, hd, W) // q and k heads are adjacent
		m.w.AttentionForward(a.att[l], a.lse[l], a.qkv[l], m.B, md.T, H, KVH, hd)
		copy(a.mid[l], a.resid[l])
		m.matmul(a.mid[l], a.att[l], w.o, N, H*hd, C, 1)
		m.w.RMSNormForward(a.ln2[l], a.rstd2[l], a.mid[l], w.ln2, N, C, eps)
		m.matmul(a.gu[l], a.ln2[l], w.gu, N, C, 2*F, 0)
		m.w.SwiGLUForward(a.h[l], a.gu[l], N, F)
		copy(a.resid[l+1], a.mid[l])
		m.matmul(a.resid[l+1], a.h[l], w.down, N, F, C, 1)
	}
	m.w.RMSNormForward(a.lnf, a.rstdf, a.resid[c.Layers], md.p.lnf, N, C, eps)
	m.matmul(a.logits, a.lnf, md.p.lm, N, C, c.Vocab, 0)
	var dl []float32
	if lossScale > 0 {
		dl = a.logits
	}
	m.w.XEntForwardBackward(dl, a.losses, a.ce, a.logits, targets, N, c.Vocab, float32(c.ZLoss), lossScale)
	for n := 0; n < N; n++ {
		ce += float64(a.ce[n])
		obj += float64(a.losses[n])
	}
	return ce, obj
}

// backward accumulates into the lane's gradient the gradient of the objective
// whose dlogits the lane's last forward (with lossScale > 0) left in a.logits;
// with write, it overwrites the gradient instead: the products' dW with
// beta = 0, and the norm gains and the embedding (which the layers only add
// to) cleared first — a small part of the parameters.
func (m *lane) backward(md *model, inputs []int32, write bool) {
	c, a, N := md.cfg, &m.a, m.B*md.T
	m.dwBeta = 1
	if write {
		m.dwBeta = 0
		clear(m.g.wte)
		clear(m.g.lnf)
		for _, g := range m.g.layers {
			clear(g.ln1)
			clear(g.ln2)
		}
	}
	C, F, H, KVH, hd, W := c.Dim, c.FFN, c.Heads, c.KVHeads, c.HeadDim(), c.qkvDim()
	m.matmulBackward(md, md.redLM, a.dln, m.g.lm, a.logits, a.lnf, md.p.lm, N, C, c.Vocab)
	clear(a.dresid)
	m.w.RMSNormBackward(a.dresid, m.g.lnf, a.dln, a.resid[c.Layers], md.p.lnf, a.rstdf, N, C)
	for l := c.Layers - 1; l >= 0; l-- {
		w, g, r := md.p.layers[l], m.g.layers[l], md.redLayers[l]
		// resid[l+1] = mid + h·downᵀ
		m.matmulBackward(md, r.down, a.dh, g.down, a.dresid, a.h[l], w.down, N, F, C)
		m.w.SwiGLUBackward(a.dgu, a.dh, a.gu[l], N, F)
		m.matmulBackward(md, r.gu, a.dln, g.gu, a.dgu, a.ln2[l], w.gu, N, C, 2*F)
		m.w.RMSNormBackward(a.dresid, g.ln2, a.dln, a.mid[l], w.ln2, a.rstd2[l], N, C)
		// mid = resid[l] + att·oᵀ
		m.matmulBackward(md, r.o, a.datt, g.o, a.dresid, a.att[l], w.o, N, H*hd, C)
		m.w.AttentionBackward(a.dqkv, a.datt, a.att[l], a.lse[l], a.qkv[l], m.B, md.T, H, KVH, hd)
		m.w.RoPEBackward(a.dqkv, md.cos, md.sin, m.B, md.T, H+KVH, hd, W)
		m.matmulBackward(md, r.qkv, a.dln, g.qkv, a.dqkv, a.ln1[l], w.qkv, N, C, W)
		m.w.RMSNormBackward(a.dresid, g.ln1, a.dln, a.resid[l], w.ln1, a.rstd1[l], N, C)
	}
	for n, tok := range inputs { // embedding: serial, so repeated tokens add in a fixed order
		dst := m.g.wte[int(tok)*C : (int(tok)+1)*C]
		for i, v := range a.dresid[n*C : (n+1)*C] {
			dst[i] += v
		}
	}
}

// InitParams fills dst (laid out as c.Layout()) with the deterministic initial
// parameters for seed: norm gains 1; other tensors uniform with standard
// deviation 0.02, the residual output projections (o_proj, down_proj) scaled by
// 1/sqrt(2·Layers) (GPT-2). Only integer arithmetic and one float32 rounding per
// value are used, so every machine produces the same bits.
func InitParams(c Config, seed uint64, dst []float32) {
	lay := c.Layout()
	for ti, t := range lay {
		v := dst[t.Offset : t.Offset+t.Size()]
		if t.isNorm() {
			for i := range v {
				v[i] = 1
			}
			continue
		}
		std := 0.02
		if hasSuffix(t.Name, "o_proj.weight") || hasSuffix(t.Name, "down_proj.weight") {
			std /= math.Sqrt(2 * float64(c.Layers))
		}
		a := std * math.Sqrt(3) // uniform(−a, a) has standard deviation std
		r := newRNG(mix(seed, 0x1417, uint64(ti)))
		for i := range v {
			u := float64(r.next()>>11) * 0x1p-53 // [0, 1)
			v[i] = float32((2*u - 1) * a)
		}
	}
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

// argmax returns the most likely next token at row n of the last forward pass
// (valid after a forward with lossScale 0, which leaves the logits in place).
func (m *model) argmax(n int) int32 { return Argmax(m.logits(n)) }
