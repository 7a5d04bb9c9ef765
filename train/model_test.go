package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/intellect-node/intellect-node/kernels"
)

// gradCfg is a small but complete model: GQA (4 query heads share 2 kv heads),
// two layers, z-loss on, awkward sizes.
var gradCfg = Config{Name: "gradcheck", Vocab: 19, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, FFN: 24,
	SeqLen: 8, RopeTheta: 10000, NormEps: 1e-5, ZLoss: 0.01}

// matmulRef64: out (N, OC) = inp (N, IC) · wᵀ, w (OC, IC).
func matmulRef64(inp, w []float64, N, IC, OC int) []float64 {
	out := make([]float64, N*OC)
	for n := 0; n < N; n++ {
		for o := 0; o < OC; o++ {
			var s float64
			for i := 0; i < IC; i++ {
				s += inp[n*IC+i] * w[o*IC+i]
			}
			out[n*OC+o] = s
		}
	}
	return out
}

// refLoss is the float64 reference model: the mean training objective
// (cross-entropy + max-z-loss) of params on (inputs, targets), written
// independently of model.go from the float64 reference kernels.
func refLoss(c Config, p []float64, inputs, targets []int32, B, T int) float64 {
	N, C, F, H, KVH, hd := B*T, c.Dim, c.FFN, c.Heads, c.KVHeads, c.HeadDim()
	W := (H + 2*KVH) * hd
	lay := c.Layout()
	get := func(i int) []float64 { return p[lay[i].Offset : lay[i].Offset+lay[i].Size()] }
	x := make([]float64, N*C)
	for n, tok := range inputs {
		copy(x[n*C:(n+1)*C], get(0)[int(tok)*C:])
	}
	ln := make([]float64, N*C)
	for l := 0; l < c.Layers; l++ {
		i := 1 + 9*l
		kernels.RMSNormForwardRef(ln, x, get(i), N, C, c.NormEps)
		wqkv := append(append(append([]float64{}, get(i+1)...), get(i+2)...), get(i+3)...)
		qkv := matmulRef64(ln, wqkv, N, C, W)
		rot := make([]float64, len(qkv))
		kernels.RoPEForwardRef(rot, qkv, B, T, H+KVH, hd, W, c.RopeTheta)
		att := make([]float64, N*H*hd)
		kernels.AttentionForwardRef(att, rot, B, T, H, KVH, hd)
		for j, v := range matmulRef64(att, get(i+4), N, H*hd, C) {
			x[j] += v
		}
		kernels.RMSNormForwardRef(ln, x, get(i+5), N, C, c.NormEps)
		wgu := append(append([]float64{}, get(i+6)...), get(i+7)...)
		gu := matmulRef64(ln, wgu, N, C, 2*F)
		h := make([]float64, N*F)
		kernels.SwiGLUForwardRef(h, gu, N, F)
		for j, v := range matmulRef64(h, get(i+8), N, F, C) {
			x[j] += v
		}
	}
	kernels.RMSNormForwardRef(ln, x, get(len(lay)-2), N, C, c.NormEps)
	logits := matmulRef64(ln, get(len(lay)-1), N, C, c.Vocab)
	return kernels.XEntRef(logits, targets, N, c.Vocab, c.ZLoss) / float64(N)
}

func randTokens(r *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(r.IntN(vocab))
	}
	return t
}

// randParams fills a model with random values large enough that every path
// carries gradient (norm gains near 1).
func randParams(r *rand.Rand, c Config, p []float32) {
	for _, ti := range c.Layout() {
		for i := ti.Offset; i < ti.Offset+ti.Size(); i++ {
			if ti.isNorm() {
				p[i] = 1 + 0.2*float32(r.NormFloat64())
			} else {
				p[i] = 0.3 * float32(r.NormFloat64())
			}
		}
	}
}

// TestModelGradientCheck compares the whole model's hand-written backward pass
// (float32) with central finite differences of the independent float64
// reference model, on a sample of entries of every tensor: with one lane, and
// with the batch cut into two lanes (each lane's gradient added into the
// model's after backward; TestLanesMatchOneLane covers accumulation).
func TestModelGradientCheck(t *testing.T) {
	for _, tc := range []struct{ B, T, lanes, perTensor int }{{2, 7, 1, 6}, {4, 5, 2, 4}} {
		t.Run(fmt.Sprintf("lanes=%d", tc.lanes), func(t *testing.T) {
			r := rand.New(rand.NewPCG(21, uint64(22+tc.lanes)))
			m, err := newModelLanes(gradCfg, tc.B, tc.T, tc.lanes)
			if err != nil {
				t.Fatal(err)
			}
			randParams(r, gradCfg, m.params)
			gradCheck(t, r, m, tc.perTensor, 2e-3)
		})
	}
}

// TestLaneReduction: the gradient ranges tile the flat gradient with one
// range per matmul weight; after a two-lane backward, m.grads is lane 0's
// gradient plus lane 1's, element by element, whichever lane reduced a range
// (lane 0's alone comes from a one-lane model on its rows), and the Σ grads²
// the ranges kept is that of the result.
func TestLaneReduction(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	c, B, T := gradCfg, 4, 6
	two, err := newModelLanes(c, B, T, 2)
	if err != nil {
		t.Fatal(err)
	}
	half, _ := newModelLanes(c, B/2, T, 1)
	off, byLanes := 0, 0
	for _, rg := range two.red {
		if rg.off != off || rg.n <= 0 {
			t.Fatalf("range at %d (n=%d), want one at %d", rg.off, rg.n, off)
		}
		off += rg.n
		if rg.byLanes {
			byLanes++
		}
	}
	if off != len(two.grads) || byLanes != 4*c.Layers+1 {
		t.Fatalf("ranges cover %d of %d floats, %d reduced by lanes (want %d)", off, len(two.grads), byLanes, 4*c.Layers+1)
	}
	randParams(r, c, two.params)
	copy(half.params, two.params)
	in, tg := randTokens(r, B*T, c.Vocab), randTokens(r, B*T, c.Vocab)
	scale := float32(1.0 / float64(B*T))
	for round := 0; round < 3; round++ { // the lanes race differently each time
		two.zeroGrads()
		two.forward(in, tg, scale)
		two.backward(in)
		half.zeroGrads()
		half.forward(in[:B/2*T], tg[:B/2*T], scale)
		half.backward(in[:B/2*T])
		for i, g := range two.grads {
			if want := half.grads[i] + two.lanes[1].grads[i]; math.Float32bits(g) != math.Float32bits(want) {
				t.Fatalf("round %d: grads[%d] = %v, want lane 0's %v + lane 1's %v = %v", round, i, g, half.grads[i], two.lanes[1].grads[i], want)
			}
		}
		ss, want := two.gradSumSquares(), kernels.SumSquares(two.grads)
		if !two.ssValid || math.Abs(ss-want) > 1e-12*want {
			t.Fatalf("round %d: Σ grads² %v from the ranges (valid %v), %v by a pass", round, ss, two.ssValid, want)
		}
	}
}

// TestLanesMatchOneLane: two lanes give the one-lane loss and gradient up to
// rounding (only the order of the per-token sums differs), over two
// accumulated micro-batches; zeroGrads gives the bits of clearing.
func TestLanesMatchOneLane(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	c, B, T := gradCfg, 4, 6
	one, _ := newModelLanes(c, B, T, 1)
	two, err := newModelLanes(c, B, T, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(two.lanes) != 2 || len(one.lanes) != 1 {
		t.Fatalf("lanes: %d and %d", len(one.lanes), len(two.lanes))
	}
	randParams(r, c, one.params)
	copy(two.params, one.params)
	var batches [][2][]int32
	for micro := 0; micro < 2; micro++ {
		in, tg := randTokens(r, B*T, c.Vocab), randTokens(r, B*T, c.Vocab)
		batches = append(batches, [2][]int32{in, tg})
		scale := float32(1.0 / float64(2*B*T))
		ce1, obj1 := one.forward(in, tg, scale)
		ce2, obj2 := two.forward(in, tg, scale)
		if math.Abs(ce1-ce2) > 1e-6*ce1 || math.Abs(obj1-obj2) > 1e-6*obj1 {
			t.Fatalf("micro %d: loss %v/%v with one lane, %v/%v with two", micro, ce1, obj1, ce2, obj2)
		}
		one.backward(in)
		two.backward(in)
	}
	var maxDiff, maxG float64
	for i := range one.grads {
		maxDiff = math.Max(maxDiff, math.Abs(float64(one.grads[i])-float64(two.grads[i])))
		maxG = math.Max(maxG, math.Abs(float64(one.grads[i])))
	}
	if maxDiff > 1e-5*maxG {
		t.Fatalf("gradients differ by %.3g (max %.3g)", maxDiff, maxG)
	}
	// zeroGrads (write instead of clear-and-add) gives the same bits, over the
	// same two micro-batches, with lane 1's buffer holding stale values.
	for _, m := range []*model{one, two} {
		want := append([]float32(nil), m.grads...)
		for i := range m.grads {
			m.grads[i] = float32(i%7) - 3 // garbage that zeroGrads must make irrelevant
		}
		m.zeroGrads()
		for _, mb := range batches {
			m.forward(mb[0], mb[1], float32(1.0/float64(2*B*T)))
			m.backward(mb[0])
		}
		if !slices.Equal(m.grads, want) {
			t.Fatalf("%d lanes: zeroGrads + backward differs from clear + backward", len(m.lanes))
		}
	}
	// The lanes' logits are the model's rows in order.
	in, tg := randTokens(r, B*T, c.Vocab), randTokens(r, B*T, c.Vocab)
	one.forward(in, tg, 0)
	two.forward(in, tg, 0)
	for n := 0; n < B*T; n++ {
		if one.argmax(n) != two.argmax(n) {
			t.Fatalf("row %d: argmax %d with one lane, %d with two", n, one.argmax(n), two.argmax(n))
		}
	}
	if _, err := newModelLanes(c, 3, T, 2); err == nil {
		t.Fatal("2 lanes accepted for a batch of 3")
	}
}

// TestLaneCount: two lanes only where the batch splits evenly into lanes of
// at least 64 tokens and the extra gradient stays under 1 GiB.
func TestLaneCount(t *testing.T) {
	for _, tc := range []struct {
		B, T int
		n    int64
		want int
	}{{4, 64, 1 << 20, 2}, {2, 64, 1 << 20, 2}, {3, 64, 1 << 20, 1}, {1, 256, 1 << 20, 1}, {2, 32, 1 << 20, 1}, {8, 256, 1 << 29, 1}} {
		if got := laneCount(tc.B, tc.T, tc.n); got != tc.want {
			t.Errorf("laneCount(%d, %d, %d) = %d, want %d", tc.B, tc.T, tc.n, got, tc.want)
		}
	}
}

// TestTinyPresetGradientCheck runs the same check on the real `tiny` preset
// with its real initialisation (2 entries per tensor to stay fast).
func TestTinyPresetGradientCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("float64 reference of a 1 M-parameter model: a few seconds")
	}
	c, _ := Preset("tiny")
	c.ZLoss = 0.01 // make the z-loss term visible in the gradient
	m, err := newModel(c, 1, 6)
	if err != nil {
		t.Fatal(err)
	}
	InitParams(c, 3, m.params)
	gradCheck(t, rand.New(rand.NewPCG(23, 24)), m, 2, 5e-3)
}

func gradCheck(t *testing.T, r *rand.Rand, m *model, perTensor int, tol float64) {
	t.Helper()
	c, B, T := m.cfg, m.B, m.T
	inputs, targets := randTokens(r, B*T, c.Vocab), randTokens(r, B*T, c.Vocab)
	clear(m.grads)
	_, obj := m.forward(inputs, targets, float32(1.0/float64(B*T)))
	m.backward(inputs)

	p64 := make([]float64, len(m.params))
	for i, v := range m.params {
		p64[i] = float64(v)
	}
	want := refLoss(c, p64, inputs, targets, B, T)
	if math.Abs(obj-want) > 1e-5*math.Abs(want) {
		t.Fatalf("forward: float32 objective %.8f, float64 reference %.8f", obj, want)
	}
	for _, ti := range c.Layout() {
		var maxDiff, maxG float64
		for _, i := range sampleIndices(r, ti, inputs, c.Dim, perTensor) {
			old := p64[i]
			const h = 1e-5
			p64[i] = old + h
			fp := refLoss(c, p64, inputs, targets, B, T)
			p64[i] = old - h
			fm := refLoss(c, p64, inputs, targets, B, T)
			p64[i] = old
			fd := (fp - fm) / (2 * h)
			maxDiff = math.Max(maxDiff, math.Abs(fd-float64(m.grads[i])))
			maxG = math.Max(maxG, math.Abs(fd))
		}
		if maxG == 0 || maxDiff > tol*maxG {
			t.Errorf("%s: max |analytic − numeric| = %.3g, max |numeric| = %.3g", ti.Name, maxDiff, maxG)
		}
	}
}

// sampleIndices picks a few entries of a tensor; for the embedding, entries of
// rows that the inputs use (other rows have zero gradient).
func sampleIndices(r *rand.Rand, ti TensorInfo, inputs []int32, C, n int) []int {
	var idx []int
	for k := 0; k < n; k++ {
		if ti.Name == "model.embed_tokens.weight" {
			idx = append(idx, ti.Offset+int(inputs[r.IntN(len(inputs))])*C+r.IntN(C))
		} else {
			idx = append(idx, ti.Offset+r.IntN(ti.Size()))
		}
	}
	return idx
}

func TestPresetsValidate(t *testing.T) {
	want := map[string][2]float64{ // parameter count bounds
		"tiny": {0.8e6, 1.2e6}, "small": {10e6, 20e6}, "150m": {130e6, 170e6},
		"1b": {0.9e9, 1.5e9}, "intellect-1-10b": {9.5e9, 11e9},
	}
	names := PresetNames()
	if len(names) != len(want) {
		t.Fatalf("PresetNames = %v", names)
	}
	for _, n := range names {
		c, err := Preset(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		p := float64(c.NumParams())
		if p < want[n][0] || p > want[n][1] {
			t.Errorf("%s: %.4g params, want %v", n, p, want[n])
		}
		var sum int
		for _, ti := range c.Layout() {
			sum += ti.Size()
		}
		if int64(sum) != c.NumParams() {
			t.Errorf("%s: layout holds %d values, NumParams %d", n, sum, c.NumParams())
		}
		if _, err := DefaultOptions(n); err != nil {
			t.Errorf("DefaultOptions(%s): %v", n, err)
		}
	}
	c, _ := Preset("intellect-1-10b")
	if c.Layers != 42 || c.Dim != 4096 || c.Heads != 32 || c.SeqLen != 8192 || c.Vocab != 128256 {
		t.Errorf("intellect-1-10b = %+v", c)
	}
	if _, err := Preset("nope"); err == nil {
		t.Error("unknown preset accepted")
	}
}

func TestConfigValidateRejects(t *testing.T) {
	base, _ := Preset("tiny")
	for name, mut := range map[string]func(*Config){
		"zero dim":         func(c *Config) { c.Dim = 0 },
		"heads not divide": func(c *Config) { c.Heads = 3 },
		"odd head dim":     func(c *Config) { c.Dim, c.Heads = 12, 4 },
		"kv not divide":    func(c *Config) { c.KVHeads = 3 },
		"negative zloss":   func(c *Config) { c.ZLoss = -1 },
		"nan eps":          func(c *Config) { c.NormEps = math.NaN() },
		"huge vocab":       func(c *Config) { c.Vocab = 1 << 30 },
	} {
		c := base
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}

// TestGradAccumulation: backward adds into the gradients, so two
// micro-batches at scale 1/(2N) give the mean of their separate gradients.
func TestGradAccumulation(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	c, B, T := gradCfg, 2, 5
	m, _ := newModel(c, B, T)
	randParams(r, c, m.params)
	in1, tg1 := randTokens(r, B*T, c.Vocab), randTokens(r, B*T, c.Vocab)
	in2, tg2 := randTokens(r, B*T, c.Vocab), randTokens(r, B*T, c.Vocab)
	grad := func(in, tg []int32) []float32 {
		clear(m.grads)
		m.forward(in, tg, float32(1.0/float64(B*T)))
		m.backward(in)
		return append([]float32(nil), m.grads...)
	}
	g1, g2 := grad(in1, tg1), grad(in2, tg2)
	clear(m.grads)
	half := float32(1.0 / float64(2*B*T))
	m.forward(in1, tg1, half)
	m.backward(in1)
	m.forward(in2, tg2, half)
	m.backward(in2)
	var maxDiff, maxG float64
	for i := range g1 {
		want := (float64(g1[i]) + float64(g2[i])) / 2
		maxDiff = math.Max(maxDiff, math.Abs(float64(m.grads[i])-want))
		maxG = math.Max(maxG, math.Abs(want))
	}
	if maxDiff > 1e-5*maxG {
		t.Fatalf("accumulated gradient off by %.3g (max %.3g)", maxDiff, maxG)
	}
}
