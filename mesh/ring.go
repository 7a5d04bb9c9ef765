package mesh

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
)

// Ring is the decided membership of one all-reduce attempt of an outer step.
type Ring struct {
	// ID is hash(step, round, members, weights) in hex; the all-reduce
	// handshake compares it and aborts on a mismatch.
	ID string
	// Step is the outer step the ring reduces.
	Step uint64
	// Round is the agreement round that decided it.
	Round uint32
	// Members are sorted; ring order is this order.
	Members []PeerID
	// Weights[i] is the number of inner steps Members[i] contributes.
	Weights []float32
}

// Rank returns id's position in Members, or -1 if it is not a member.
func (r Ring) Rank(id PeerID) int {
	i, ok := slices.BinarySearch(r.Members, id)
	if !ok {
		return -1
	}
	return i
}

// meshNewRing builds the ring of a decided vote; members are sorted.
func meshNewRing(step uint64, round uint32, members []Member) Ring {
	r := Ring{Step: step, Round: round, Members: make([]PeerID, len(members)), Weights: make([]float32, len(members))}
	for i, mb := range members {
		r.Members[i] = mb.ID
		r.Weights[i] = float32(mb.InnerSteps)
	}
	r.ID = meshRingID(step, round, members)
	return r
}

// meshRingID is the hex of the first 16 bytes of SHA-256 over a domain tag,
// step, round and the length-prefixed members with their weights.
func meshRingID(step uint64, round uint32, members []Member) string {
	h := sha256.New()
	b := []byte("intellect/mesh/ring/1\x00")
	b = binary.BigEndian.AppendUint64(b, step)
	b = binary.BigEndian.AppendUint32(b, round)
	b = binary.BigEndian.AppendUint32(b, uint32(len(members)))
	for _, mb := range members {
		b = binary.AppendUvarint(b, uint64(len(mb.ID)))
		b = append(b, mb.ID...)
		b = binary.BigEndian.AppendUint32(b, mb.InnerSteps)
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Fetch asks node to obtain the model (θ₀ and outer momentum) of Step,
// whose θ₀ hash is Hash, from the peers From (in the order to try them),
// and to verify it against the hash the donors gossip. A donor holds only
// its current θ₀: if it moved on meanwhile, a newer model from it is as
// good. node then calls Mesh.Synced with the step and hash it obtained, or
// Mesh.SyncFailed, and the mesh chooses again at once (without either,
// after SyncTimeoutTicks).
type Fetch struct {
	Step     uint64
	Hash     string
	PrevHash string // hash of θ₀(Step−1) on the donors' side, "" if unknown
	From     []PeerID
}
