//go:build !amd64

package kernels

const useVecAttention = false

func dotVec(a, b []float32) float32         { return dotGo(a, b) }
func axpyVec(alpha float32, x, y []float32) { axpyGo(alpha, x, y) }
