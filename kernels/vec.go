package kernels

// Dot returns Σ a[i]·b[i] over len(a) (b at least as long). On amd64 with
// AVX2+FMA it runs the vector loop attention uses; dotGo is its slow twin.
// For matrix-vector products of a few rows, where Sgemm's packing costs
// more than the product (one decoded token).
func Dot(a, b []float32) float32 { return dot32(a, b) }

// Axpy computes y[i] += alpha·x[i] over len(x) (y at least as long),
// vectorised like Dot; axpyGo is its slow twin.
func Axpy(alpha float32, x, y []float32) { axpy32(alpha, x, y) }
