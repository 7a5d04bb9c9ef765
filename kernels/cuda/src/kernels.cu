// kernels.cu — the single translation unit nvcc compiles to PTX
// (kernels/cuda/build.sh ptx). Every __global__ here is extern "C" so the Go
// side finds it by name; kernels/cuda/manifest.go lists them and a test checks
// that the embedded PTX defines each one.
#include "elementwise.cu"
#include "norm.cu"
#include "xent.cu"
#include "attention.cu"
#include "quant.cu"
#include "attention_tc.cu"
