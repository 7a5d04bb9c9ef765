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
	// Members in ring order: member i sends to member i+1. The order
	// maximises the slowest link by the costs members put in their votes
	// (mesh/order.go); with no costs known it is sorted by ID.
	Members []PeerID
	// Weights[i] is the number of inner steps Members[i] contributes.
	Weights []float32
	// Owners, set only for a direct scatter (Config.AllDirect) in which
	// some members do not reach every other directly, lists in increasing
	// order the ranks that own a segment: those that do. The others take
	// part as clients (collective.ScatterConfig.Owners). Nil: every member
	// owns one.
	Owners []int
}

// Rank returns id's position in Members (its ring rank), or -1 if it is
// not a member.
func (r Ring) Rank(id PeerID) int {
	return slices.Index(r.Members, id)
}

// meshNewRing builds the ring of a decided vote. members are sorted; links[i]
// is member i's row of link costs (nil if unknown). The ring's order is
// meshRingOrder of those rows: the identity when nothing is known, and then
// the id is meshRingID of the sorted members. With allDirect,
// Owners are the ranks of the members meshOwnerIndexes finds (nil when all
// are); they are part of the id.
func meshNewRing(step uint64, hash string, round uint32, members []Member, links [][]uint32, allDirect bool) Ring {
	order := meshRingOrder(len(members), links)
	ordered := make([]Member, len(members))
	for pos, i := range order {
		ordered[pos] = members[i]
	}
	r := Ring{Step: step, Round: round, Members: make([]PeerID, len(members)), Weights: make([]float32, len(members))}
	for i, mb := range ordered {
		r.Members[i] = mb.ID
		r.Weights[i] = float32(mb.InnerSteps)
	}
	if c, ok := meshSymmetricCosts(links); allDirect && ok && len(links) == len(members) {
		if owners := meshOwnerIndexes(c); len(owners) < len(members) {
			for pos, i := range order {
				if slices.Contains(owners, i) {
					r.Owners = append(r.Owners, pos)
				}
			}
		}
	}
	r.ID = meshRingID(step, hash, round, ordered, r.Owners)
	return r
}

// meshRingID is the hex of the first 16 bytes of SHA-256 over a domain tag,
// step, the hash of the model the ring averages from (θ₀ of step), round
// and the length-prefixed members (in ring order) with their weights, then
// the owners' ranks if any. The model's hash makes a ring of one step,
// round and members on another line another ring: a member that adopted a
// line and reached the same step with the same peers ran an attempt id it
// had run before, which the all-reduce services refuse.
func meshRingID(step uint64, hash string, round uint32, members []Member, owners []int) string {
	h := sha256.New()
	b := []byte("intellect/mesh/ring/2\x00")
	b = binary.BigEndian.AppendUint64(b, step)
	b = binary.AppendUvarint(b, uint64(len(hash)))
	b = append(b, hash...)
	b = binary.BigEndian.AppendUint32(b, round)
	b = binary.BigEndian.AppendUint32(b, uint32(len(members)))
	for _, mb := range members {
		b = binary.AppendUvarint(b, uint64(len(mb.ID)))
		b = append(b, mb.ID...)
		b = binary.BigEndian.AppendUint32(b, mb.InnerSteps)
	}
	if owners != nil {
		b = append(b, "owners\x00"...)
		for _, o := range owners {
			b = binary.BigEndian.AppendUint32(b, uint32(o))
		}
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
