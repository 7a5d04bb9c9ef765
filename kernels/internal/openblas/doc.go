// Package openblas wraps OpenBLAS's cblas_sgemm through cgo. It exists only as
// the baseline of the kernels package's SGEMM benchmarks and is built only with
// the build tag "openblas" (Debian: apt-get install libopenblas-dev); normal
// builds of the project need no C library. Without the tag the package is empty.
//
// OpenBLAS picks its kernels when the library loads; set OPENBLAS_CORETYPE
// (e.g. SkylakeX for AVX-512) and OPENBLAS_NUM_THREADS in the environment of
// the process before it starts.
package openblas
