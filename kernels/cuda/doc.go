// Package cuda is the GPU backend of the training core: a thin layer over the
// CUDA driver API (gorgonia.org/cu v0.9.6) for contexts, streams, events,
// device and pinned host memory, async copies and kernel launches; a cgo shim
// that dlopen()s cuBLAS (libcublas.so.13, .12 or .11, or $INTELLECT_CUBLAS) for
// bf16 GemmEx / strided-batched matmuls with fp32 accumulation; and our own
// kernels in CUDA C (src/*.cu: RMSNorm, RoPE, flash-style causal attention
// forward/backward, SwiGLU, softmax cross-entropy with max-z-loss, AdamW, int8
// quantize/dequantize, casts), compiled to PTX by nvcc and embedded, so that
// building needs no nvcc (kernels/cuda/build.sh ptx regenerates them).
//
// Everything that touches the driver or cgo is behind the `cuda` build tag;
// without it this package holds only the embedded PTX, the kernel manifest and
// pure host-side helpers (bf16 conversion, launch geometry, FLOP accounting),
// all of which are tested on machines with no GPU. See docs/cuda.md.
//
// Like the rest of kernels/, this package imports only the standard library
// when built without the tag.
package cuda
