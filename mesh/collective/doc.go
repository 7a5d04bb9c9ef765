// Package collective is the all-reduce a decided ring runs: the sharded,
// chunked ring reduce-scatter and all-gather over an abstract Transport
// (AllReduce, AllReduceInto), the robust direct scatter over a full mesh
// (ScatterAllReduce), and their codecs: fp32; int8 with one 256-entry
// table per chunk; and the compressed q4, q2 (dense, 2^b bucket means) and
// top-k (sparse), which encode each member's contribution once with error
// feedback in its own units and which the ring gathers instead of
// reducing. Every member ends with bit-identical values: everybody decodes
// the same bytes and sums in the same order.
//
// It is pure in what it computes — the standard library only, no clock, no
// network: a Transport (p2p's libp2p streams, or MemRing in tests) moves
// the bytes. AllReduce starts two goroutines per shard (send and receive)
// and joins them before it returns.
//
// Membership — which members form the ring, their order and weights — is
// package mesh's; docs/allreduce.md has the algorithm, the wire format of a
// chunk and the measured figures.
package collective
