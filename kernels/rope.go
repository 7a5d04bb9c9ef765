package kernels

import "math"

// RoPETables fills the rotary tables for positions [0, T) and head size hd in
// the Hugging Face Llama (rotate_half) convention: for i < hd/2,
// θ_i = theta^(−2i/hd), cos[t, i] = cos(t·θ_i), sin[t, i] = sin(t·θ_i).
// Computed in float64, then rounded.
//
//	cos, sin (T, hd/2)  written
func RoPETables(cos, sin []float32, T, hd int, theta float64) {
	half := hd / 2
	for t := 0; t < T; t++ {
		for i := 0; i < half; i++ {
			f := float64(t) * math.Pow(theta, -2*float64(i)/float64(hd))
			cos[t*half+i] = float32(math.Cos(f))
			sin[t*half+i] = float32(math.Sin(f))
		}
	}
}

// RoPEForward rotates, in place, nh heads of size hd at the start of each row of
// x, the row of token (b, t) being at x[(b·T+t)·stride:]. The head's first and
// second halves form the pairs (HF rotate_half):
//
//	x'[i]      = x[i]·cos − x[i+hd/2]·sin
//	x'[i+hd/2] = x[i+hd/2]·cos + x[i]·sin
//
//	x        (B, T, stride), heads in [0, nh·hd) of each row
//	cos, sin (T, hd/2)
func RoPEForward(x, cos, sin []float32, B, T, nh, hd, stride int) {
	Workers(0).ropeApply(x, cos, sin, B, T, nh, hd, stride, 1)
}

// RoPEForward is the package's RoPEForward on at most w goroutines.
func (w Workers) RoPEForward(x, cos, sin []float32, B, T, nh, hd, stride int) {
	w.ropeApply(x, cos, sin, B, T, nh, hd, stride, 1)
}

// RoPEBackward turns, in place, the gradient with respect to the rotated x into
// the gradient with respect to x before RoPEForward: the rotation's transpose,
// i.e. the rotation by −θ. Same shapes as RoPEForward.
func RoPEBackward(dx, cos, sin []float32, B, T, nh, hd, stride int) {
	Workers(0).ropeApply(dx, cos, sin, B, T, nh, hd, stride, -1)
}

// RoPEBackward is the package's RoPEBackward on at most w goroutines.
func (w Workers) RoPEBackward(dx, cos, sin []float32, B, T, nh, hd, stride int) {
	w.ropeApply(dx, cos, sin, B, T, nh, hd, stride, -1)
}

func (w Workers) ropeApply(x, cos, sin []float32, B, T, nh, hd, stride int, sign float32) {
	half := hd / 2
	w.par(B*T, 16, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			t := n % T
			c, s := cos[t*half:(t+1)*half], sin[t*half:(t+1)*half]
			row := x[n*stride : n*stride+nh*hd]
			for h := 0; h < nh; h++ {
				ropeRow(row[h*hd:h*hd+half], row[h*hd+half:(h+1)*hd], c, s, sign)
			}
		}
	})
}

// RoPEForwardRef is the float64 reference of RoPEForward, computing the angles
// itself: out = rotated x, both (B, T, stride) with nh heads of hd at the start
// of each row; other elements are copied.
func RoPEForwardRef(out, x []float64, B, T, nh, hd, stride int, theta float64) {
	copy(out, x[:B*T*stride])
	half := hd / 2
	for n := 0; n < B*T; n++ {
		t := n % T
		for h := 0; h < nh; h++ {
			base := n*stride + h*hd
			for i := 0; i < half; i++ {
				f := float64(t) * math.Pow(theta, -2*float64(i)/float64(hd))
				c, s := math.Cos(f), math.Sin(f)
				a, b := x[base+i], x[base+i+half]
				out[base+i] = a*c - b*s
				out[base+i+half] = b*c + a*s
			}
		}
	}
}

// ropeRow rotates the pairs (a[i], b[i]) by the angle whose cosine is c[i] and
// sine sign·s[i], eight at a time with AVX where available; the explicit
// float32 roundings keep GOAMD64=v3 from fusing the Go loop, so both loops
// give the same bits (TestRowLoopsVectorBitIdentical).
func ropeRow(a, b, c, s []float32, sign float32) {
	b, c, s = b[:len(a)], c[:len(a)], s[:len(a)]
	i := 0
	if useVecAttention && len(a) >= 8 {
		ropeRowAVX2(&a[0], &b[0], &c[0], &s[0], len(a), sign)
		i = len(a) &^ 7
	}
	for ; i < len(a); i++ {
		si := sign * s[i]
		a[i], b[i] = float32(a[i]*c[i])-float32(b[i]*si), float32(b[i]*c[i])+float32(a[i]*si)
	}
}
