package node

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/intellect-node/intellect-node/node/diloco"

	"github.com/intellect-node/intellect-node/internal/leaktest"
)

// TestMain fails the package's tests if a goroutine is left running after
// them.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// unitVec returns n deterministic values in [-scale, scale).
func unitVec(seed uint64, n int, scale float32) []float32 {
	rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * (2*rng.Float32() - 1)
	}
	return v
}

// modelOf returns copies of m's θ₀ and outer momentum.
func modelOf(m *diloco.Model) (theta0, v []float32) {
	m.Read(func(_ uint64, _ string, th, mom []float32) { theta0, v = slices.Clone(th), slices.Clone(mom) })
	return theta0, v
}

// theta0Of returns a copy of m's θ₀.
func theta0Of(m *diloco.Model) []float32 {
	th, _ := modelOf(m)
	return th
}

// momentumOf returns a copy of m's outer momentum.
func momentumOf(m *diloco.Model) []float32 {
	_, v := modelOf(m)
	return v
}
