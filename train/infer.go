package train

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/intellect-node/intellect-node/kernels"
)

// ErrToken is wrapped by errors about token ids the model cannot take.
var ErrToken = errors.New("train: bad token")

// inferChunk is the most tokens Model runs through the layers at once: a
// long prompt or scoring window goes in chunks of this many rows, which keeps
// the scratch buffers (and the (rows, V) logits) small.
const inferChunk = 64

// Model is a trained network for inference. It runs the math of the training
// forward — RMSNorm, grouped-query attention with HF rotate_half RoPE at
// rope_theta, SwiGLU, untied lm_head — on one token or one chunk at a time,
// keeping every layer's keys (after RoPE) and values in a cache, so a new
// token costs one pass over the parameters plus O(position·dim) attention
// instead of a pass over the whole context.
//
// The context window is Config.SeqLen tokens, or fewer (SetContext: a model
// trained on rows shorter than SeqLen never saw the later positions). When a
// token does not fit, the model slides:
// it clears the cache and re-encodes the last window/2 tokens at positions
// 0..window/2−1, then goes on. Past the window the logits are therefore
// those of the model on a truncated context, not of the unbounded one.
//
// A Model is not safe for concurrent use.
type Model struct {
	cfg      Config
	params   []float32 // laid out as cfg.Layout(); not written
	p        weights
	cos, sin []float32   // (SeqLen, hd/2) RoPE tables
	k, v     [][]float32 // L × (SeqLen, KVH·hd): the cache
	ctx      []int32     // the tokens in the cache, one per position
	window   int         // context window, 1..SeqLen
	s        inferActs
}

// inferActs are the activations of one chunk of at most inferChunk rows.
type inferActs struct {
	x, ln  []float32 // (n, C) residual, normed
	rstd   []float32 // (n)
	qkv    []float32 // (n, W)
	att    []float32 // (n, H·hd)
	gu     []float32 // (n, 2F)
	h      []float32 // (n, F)
	logits []float32 // (n, V)
	scores []float32 // (SeqLen) attention row
}

// NewModel returns a Model running params (laid out as c.Layout(), e.g. a
// Trainer's Params). params is used in place, not copied: it must not change
// while the Model is in use.
func NewModel(c Config, params []float32) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if int64(len(params)) != c.NumParams() {
		return nil, fmt.Errorf("%w: %d parameters, config %s has %d", ErrConfig, len(params), c.Name, c.NumParams())
	}
	S, hd, KW := c.SeqLen, c.HeadDim(), c.KVHeads*c.HeadDim()
	if need := float64(len(params)) + 2*float64(c.Layers*S*KW); need > maxCPUFloats {
		return nil, fmt.Errorf("%w: %.0f GiB for parameters and cache: too many for the CPU", ErrConfig, need*4/(1<<30))
	}
	m := &Model{cfg: c, params: params, p: carve(c, params), ctx: make([]int32, 0, S), window: S}
	m.cos, m.sin = make([]float32, S*hd/2), make([]float32, S*hd/2)
	kernels.RoPETables(m.cos, m.sin, S, hd, c.RopeTheta)
	for range c.Layers {
		m.k = append(m.k, make([]float32, S*KW))
		m.v = append(m.v, make([]float32, S*KW))
	}
	n, C, F := inferChunk, c.Dim, c.FFN
	f := func(k int) []float32 { return make([]float32, k) }
	m.s = inferActs{x: f(n * C), ln: f(n * C), rstd: f(n), qkv: f(n * c.qkvDim()), att: f(n * c.Heads * hd),
		gu: f(n * 2 * F), h: f(n * F), logits: f(n * c.Vocab), scores: f(S)}
	return m, nil
}

// Config returns the model's architecture.
func (m *Model) Config() Config { return m.cfg }

// Len returns the number of tokens in the cache (≤ Context()).
func (m *Model) Len() int { return len(m.ctx) }

// Context returns the context window: the most tokens the model attends to.
func (m *Model) Context() int { return m.window }

// SetContext sets the context window to n tokens, 1..SeqLen, and empties
// the cache.
func (m *Model) SetContext(n int) error {
	if n < 1 || n > m.cfg.SeqLen {
		return fmt.Errorf("%w: context %d, want 1..%d (seq_len)", ErrConfig, n, m.cfg.SeqLen)
	}
	m.window = n
	m.Reset()
	return nil
}

// Reset empties the cache: the next token is at position 0.
func (m *Model) Reset() { m.ctx = m.ctx[:0] }

// Forward appends tokens to the context and returns the logits (V) of the
// next token after the last of them. The slice is the Model's and valid
// until its next call. An empty tokens or an id outside [0, Vocab) is an
// error wrapping ErrToken, and leaves the cache as it was.
func (m *Model) Forward(tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrToken)
	}
	if err := m.checkTokens(tokens); err != nil {
		return nil, err
	}
	var out []float32
	m.feed(tokens, false, func(_ int, row []float32) { out = row })
	return out, nil
}

func (m *Model) checkTokens(tokens []int32) error {
	for i, t := range tokens {
		if t < 0 || int(t) >= m.cfg.Vocab {
			return fmt.Errorf("%w: token %d at %d outside the model's vocabulary 0..%d", ErrToken, t, i, m.cfg.Vocab-1)
		}
	}
	return nil
}

// feed appends tokens in chunks, sliding when the cache is full, and calls
// emit(i, logits) for every token i (all) or only the last one.
func (m *Model) feed(tokens []int32, all bool, emit func(i int, logits []float32)) {
	S, V := m.window, m.cfg.Vocab
	for done := 0; done < len(tokens); {
		if len(m.ctx) == S {
			m.slide()
		}
		n := min(len(tokens)-done, S-len(m.ctx), inferChunk)
		rows := 0
		if all {
			rows = n
		} else if done+n == len(tokens) {
			rows = 1
		}
		m.chunk(tokens[done:done+n], rows)
		for r := 0; r < rows; r++ {
			emit(done+n-rows+r, m.s.logits[r*V:(r+1)*V])
		}
		done += n
	}
}

// slide re-encodes the last window/2 tokens of the context from position 0.
func (m *Model) slide() {
	keep := append([]int32(nil), m.ctx[len(m.ctx)-m.window/2:]...)
	m.Reset()
	m.feed(keep, false, func(int, []float32) {})
}

// chunk runs tokens (that fit in the cache and are at most inferChunk) at the
// positions after the context, appends them to the cache and leaves in
// s.logits the logits of the last rows tokens (0..len(tokens)).
func (m *Model) chunk(tokens []int32, rows int) {
	c, s, N, p0 := m.cfg, &m.s, len(tokens), len(m.ctx)
	C, F, H, KVH, hd, W := c.Dim, c.FFN, c.Heads, c.KVHeads, c.HeadDim(), c.qkvDim()
	for n, tok := range tokens { // embedding: x (N, C)
		copy(s.x[n*C:(n+1)*C], m.p.wte[int(tok)*C:])
	}
	eps, half := float32(c.NormEps), hd/2
	for l, w := range m.p.layers {
		kernels.RMSNormForward(s.ln, s.rstd, s.x, w.ln1, N, C, eps)
		matmul(s.qkv, s.ln, w.qkv, N, C, W, 0)
		kernels.RoPEForward(s.qkv, m.cos[p0*half:], m.sin[p0*half:], 1, N, H+KVH, hd, W)
		m.store(l, p0, N)
		m.attend(l, p0, N)
		matmul(s.x, s.att, w.o, N, H*hd, C, 1) // x += att·oᵀ
		kernels.RMSNormForward(s.ln, s.rstd, s.x, w.ln2, N, C, eps)
		matmul(s.gu, s.ln, w.gu, N, C, 2*F, 0)
		kernels.SwiGLUForward(s.h, s.gu, N, F)
		matmul(s.x, s.h, w.down, N, F, C, 1) // x += h·downᵀ
	}
	m.ctx = append(m.ctx, tokens...)
	if rows == 0 {
		return
	}
	last := s.x[(N-rows)*C : N*C]
	kernels.RMSNormForward(s.ln, s.rstd, last, m.p.lnf, rows, C, eps)
	matmul(s.logits, s.ln, m.p.lm, rows, C, c.Vocab, 0)
}

// gemvRows is the most rows matmul multiplies with dot products: below it,
// Sgemm's packing of w (a copy of the weights) costs more than the product.
const gemvRows = 4

// matmul: out (N, OC) = inp (N, IC) · wᵀ + beta·out, w (OC, IC). Up to
// gemvRows rows it takes dot products of w's rows, in parallel over the
// output columns (each row of w read once, from memory, for all N rows).
func matmul(out, inp, w []float32, N, IC, OC int, beta float32) {
	if N > gemvRows {
		kernels.Sgemm(false, true, N, OC, IC, 1, inp, IC, w, IC, beta, out, OC)
		return
	}
	parts := min(runtime.GOMAXPROCS(0), max(1, OC*IC/(1<<15)))
	var wg sync.WaitGroup
	for k := range parts {
		wg.Go(func() {
			for o := k * OC / parts; o < (k+1)*OC/parts; o++ {
				row := w[o*IC : (o+1)*IC]
				for n := 0; n < N; n++ {
					d := kernels.Dot(inp[n*IC:(n+1)*IC], row)
					if beta != 0 {
						d += beta * out[n*OC+o]
					}
					out[n*OC+o] = d
				}
			}
		})
	}
	wg.Wait()
}

// store copies the chunk's keys and values (rows of s.qkv) into layer l's
// cache at positions p0..p0+N−1.
func (m *Model) store(l, p0, N int) {
	c := m.cfg
	hd, W := c.HeadDim(), c.qkvDim()
	KW, q := c.KVHeads*hd, c.Heads*hd
	for n := 0; n < N; n++ {
		row := m.s.qkv[n*W : (n+1)*W]
		copy(m.k[l][(p0+n)*KW:(p0+n+1)*KW], row[q:q+KW])
		copy(m.v[l][(p0+n)*KW:(p0+n+1)*KW], row[q+KW:])
	}
}

// attend writes s.att: for each chunk row n (position p0+n) and query head
// h, softmax(q·kᵀ/√hd) over cache positions 0..p0+n, times v, with query
// head h reading kv head h/(H/KVH) as kernels.AttentionForward does.
func (m *Model) attend(l, p0, N int) {
	c := m.cfg
	H, hd, W := c.Heads, c.HeadDim(), c.qkvDim()
	KW, group := c.KVHeads*hd, c.Heads/c.KVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	for n := 0; n < N; n++ {
		sc := m.s.scores[:p0+n+1]
		for h := 0; h < H; h++ {
			q := m.s.qkv[n*W+h*hd : n*W+(h+1)*hd]
			off := (h / group) * hd
			maxv := float32(math.Inf(-1))
			for j := range sc {
				sc[j] = kernels.Dot(q, m.k[l][j*KW+off:j*KW+off+hd]) * scale
				maxv = max(maxv, sc[j])
			}
			var sum float32
			for j, v := range sc {
				sc[j] = float32(math.Exp(float64(v - maxv)))
				sum += sc[j]
			}
			o := m.s.att[(n*H+h)*hd : (n*H+h+1)*hd]
			clear(o)
			for j, p := range sc {
				kernels.Axpy(p/sum, m.v[l][j*KW+off:j*KW+off+hd], o)
			}
		}
	}
}
