//go:build cuda

package main

// The cuda build (kernels/cuda/build.sh build) links the GPU engine, which
// registers itself as train engine "cuda" for --device cuda.
import _ "github.com/intellect-node/intellect-node/train/gpu"
