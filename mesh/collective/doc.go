// Package collective is the all-reduce a decided ring runs: the sharded,
// chunked ring reduce-scatter and all-gather over an abstract Transport
// (AllReduce, AllReduceInto), and its codecs (fp32, and int8 with one
// 256-entry table per chunk and optional error feedback). Every member ends
// with bit-identical values: each segment is quantized once, by the member
// that completes its reduction, and everybody decodes the same bytes.
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
