package p2p

import (
	"context"
	"runtime/pprof"
)

// PartLabel is the pprof label that names what part of a node a goroutine
// works for: PartGossip, PartDHT, PartHost here, and the node's own parts
// (agreement, averaging, hashing, training). Goroutines inherit it from
// the one that starts them, so a CPU profile of a process running many
// nodes (the scale lab) splits the CPU by part.
const PartLabel = "part"

// The parts the host labels.
const (
	PartGossip = "gossip" // gossipsub and the delivery of its messages
	PartDHT    = "dht"    // the Kademlia DHT, advertising and discovery
	PartHost   = "host"   // pings, identify, address and peer watching
)

// DoPart runs f with the calling goroutine labelled part (PartLabel) and
// restores its labels after; goroutines f starts keep the label.
func DoPart(ctx context.Context, part string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(PartLabel, part), f)
}
