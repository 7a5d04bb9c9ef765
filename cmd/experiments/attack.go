package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/intellect-node/intellect-node/node/diloco"
)

// Attacks on the average, for the in-process sweep (docs/robust.md): the last F
// of M workers replace their pseudo-gradient (and, for "weight", their
// claimed weight) before every reduction; the honest members are the
// others. The global model every honest member holds is what is evaluated.
//
//	go run ./cmd/experiments sweep -runs 'diloco:m=4;diloco:m=4,codec=robust,atk=signflip4,f=1' -seeds 1,2

// attacks maps an attack's name to what the attackers send, given the
// honest pseudo-gradients, the attacker's own, and the previous step's.
var attacks = map[string]func(a attackCtx) []float32{
	"signflip":     func(a attackCtx) []float32 { return scaled(a.own, -1) },
	"signflip4":    func(a attackCtx) []float32 { return scaled(a.own, -4) },
	"signflip1000": func(a attackCtx) []float32 { return scaled(a.own, -1000) },
	"scale1000":    func(a attackCtx) []float32 { return scaled(a.own, 1000) },
	"noise20rms":   func(a attackCtx) []float32 { return noise(a, 20*rms(a.own)) },
	"noise1000": func(a attackCtx) []float32 {
		return noise(a, 1000*math.Sqrt(sumSq(a.own))/math.Sqrt(float64(len(a.own))))
	},
	"nan": func(a attackCtx) []float32 {
		v := slices.Clone(a.own)
		for i := range v {
			if i%3 == 0 {
				v[i] = float32(math.NaN())
			} else if i%3 == 1 {
				v[i] = float32(math.Inf(1))
			}
		}
		return v
	},
	"alie": func(a attackCtx) []float32 { return alie(a.honest, 1) }, // "a little is enough", z = 1
	"ipm":  func(a attackCtx) []float32 { return scaled(mean(a.honest), -0.5) },
	"ipm4": func(a attackCtx) []float32 { return scaled(mean(a.honest), -4) },
	"zero": func(a attackCtx) []float32 { return make([]float32, len(a.own)) },
	"copy": func(a attackCtx) []float32 { return slices.Clone(a.honest[0]) },
	"stale": func(a attackCtx) []float32 {
		if a.prev == nil {
			return slices.Clone(a.own)
		}
		return slices.Clone(a.prev)
	},
	"weight": func(a attackCtx) []float32 { return scaled(a.own, -1) }, // with a claimed weight of 2²⁴
}

type attackCtx struct {
	honest    [][]float32
	own, prev []float32
	rng       *rand.Rand
}

// attacked is the alteration of an in-process run of m members in which
// the last f attack with name: each sends what the attack makes of the
// honest members' pseudo-gradients, its own and its previous one.
func attacked(name string, m, f int, seed uint64) (diloco.Alter, error) {
	atk, ok := attacks[name]
	if !ok {
		return nil, fmt.Errorf("attack %q: want one of %v", name, attackNames())
	}
	if f < 1 || f >= m {
		return nil, fmt.Errorf("attack with %d of %d workers", f, m)
	}
	rng := rand.New(rand.NewPCG(seed, 13))
	prev := map[int][]float32{} // by member
	return func(members []int, srcs [][]float32, weights []float32) ([][]float32, []float32) {
		var honest [][]float32
		for r, i := range members {
			if i < m-f {
				honest = append(honest, srcs[r])
			}
		}
		sent := slices.Clone(srcs)
		for r, i := range members {
			if i < m-f {
				continue
			}
			sent[r] = atk(attackCtx{honest: honest, own: srcs[r], prev: prev[i], rng: rng})
			if name == "weight" {
				weights[r] = 1 << 24
			}
		}
		for r, i := range members {
			prev[i] = slices.Clone(srcs[r])
		}
		return sent, weights
	}, nil
}

func attackNames() []string {
	var ns []string
	for n := range attacks {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

func scaled(v []float32, c float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = c * x
	}
	return out
}

func sumSq(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return s
}

func rms(v []float32) float64 { return math.Sqrt(sumSq(v) / float64(max(1, len(v)))) }

func noise(a attackCtx, sigma float64) []float32 {
	out := make([]float32, len(a.own))
	for i := range out {
		out[i] = float32(sigma * a.rng.NormFloat64())
	}
	return out
}

func mean(vs [][]float32) []float32 {
	out := make([]float32, len(vs[0]))
	for _, v := range vs {
		for i, x := range v {
			out[i] += x / float32(len(vs))
		}
	}
	return out
}

// alie is mean − z·std per coordinate of the honest vectors.
func alie(vs [][]float32, z float64) []float32 {
	mu := mean(vs)
	out := make([]float32, len(mu))
	for i := range mu {
		var v float64
		for _, h := range vs {
			d := float64(h[i] - mu[i])
			v += d * d
		}
		out[i] = mu[i] - float32(z*math.Sqrt(v/float64(len(vs))))
	}
	return out
}
