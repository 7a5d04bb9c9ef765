// Package kernels holds the leaf numeric functions of the training core: matrix
// multiply, norms, RoPE, attention, softmax/cross-entropy and friends. Every fast
// kernel has a simple reference twin that tests check it against.
//
// kernels imports only the standard library.
package kernels
