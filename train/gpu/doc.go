// Package gpu is the CUDA training engine: the same Llama model, loss, AdamW
// and warmup-stable-decay schedule as the CPU Trainer in package train, run on
// one NVIDIA GPU (compute capability ≥ 8.0) through kernels/cuda — bf16
// activations and matmul inputs with fp32 accumulation, fp32 master weights,
// gradients and AdamW moments, and an fp32 residual stream. With
// train.OptimizerMuon it runs Muon on the hidden matrices as the CPU trainer
// does (muon.go: element-wise kernels plus Newton–Schulz on fp32 cuBLAS
// GEMMs; the momentum in AdamW's first-moment buffer, checkpointed as
// exp_avg) and AdamW on the rest.
//
// Built with the `cuda` tag it registers itself with train.RegisterEngine as
// "cuda" (selected by --device cuda); without the tag the package is empty, so
// the default build needs no CUDA. See docs/cuda.md for what is checked where.
package gpu
