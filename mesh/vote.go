package mesh

import (
	"hash/fnv"
	"slices"
)

// meshVote is one peer's vote of an agreement round. It is not changed
// once made, except for its same cache.
type meshVote struct {
	step     uint64
	hash     string
	round    uint32
	members  []Member
	excluded []PeerID
	links    []uint32 // the voter's link costs to members (Message.Links)
	sum      uint64   // meshMembersSum(members)
	same     uint64   // the Mesh.casts serial of the own vote members equal, 0 if none found
}

// newMeshVote makes the vote msg carries, whose members' sum is sum.
func newMeshVote(msg *Message, sum uint64) *meshVote {
	return &meshVote{step: msg.Step, hash: msg.Hash, round: msg.Round, sum: sum,
		members: slices.Clone(msg.Members), excluded: slices.Clone(msg.Excluded), links: slices.Clone(msg.Links)}
}

// meshMembersSum is a fingerprint of a member list: lists with different
// sums differ; equal sums are checked in full.
func meshMembersSum(ms []Member) uint64 {
	h := fnv.New64a()
	var b [5]byte
	for _, mb := range ms {
		h.Write([]byte(mb.ID))
		b[0], b[1], b[2], b[3], b[4] = 0, byte(mb.InnerSteps), byte(mb.InnerSteps>>8), byte(mb.InnerSteps>>16), byte(mb.InnerSteps>>24)
		h.Write(b[:])
	}
	return h.Sum64()
}

// repeats reports whether msg, whose members' sum is sum, says exactly what
// the vote said: a re-broadcast, or a duplicate the network delivered.
func (v *meshVote) repeats(msg *Message, sum uint64) bool {
	return v.step == msg.Step && v.hash == msg.Hash && v.round == msg.Round && v.sum == sum &&
		slices.Equal(v.members, msg.Members) && slices.Equal(v.excluded, msg.Excluded) && slices.Equal(v.links, msg.Links)
}

// meshKeepVotes is how many steps of one peer's votes are kept: a peer that
// adopted an older line votes for lower steps again, and a late copy of a
// vote of the previous step must not hide the current one.
const meshKeepVotes = 4

// meshVotes holds a peer's latest vote of each of its last meshKeepVotes
// steps (the steps inline: found without following pointers). The zero
// value holds none.
type meshVotes struct {
	n     int
	steps [meshKeepVotes]uint64
	votes [meshKeepVotes]*meshVote
}

// get returns the vote of step, or nil.
func (vs *meshVotes) get(step uint64) *meshVote {
	for i := range vs.n {
		if vs.steps[i] == step {
			return vs.votes[i]
		}
	}
	return nil
}

// put makes v the vote of its step, replacing the lowest step when full.
func (vs *meshVotes) put(v *meshVote) {
	i := 0
	for i < vs.n && vs.steps[i] != v.step {
		i++
	}
	if i == meshKeepVotes {
		i = 0
		for j := range vs.n {
			if vs.steps[j] < vs.steps[i] {
				i = j
			}
		}
	} else if i == vs.n {
		vs.n++
	}
	vs.steps[i], vs.votes[i] = v.step, v
}

// sameAsMine reports whether v proposes exactly this node's current vote.
func (m *Mesh) sameAsMine(v *meshVote) bool {
	if v.same == m.casts {
		return true
	}
	if v.sum != m.ag.voteSum || !slices.Equal(v.members, m.ag.vote) {
		return false
	}
	v.same = m.casts
	return true
}

// votePeers returns the peer entries of this node's vote's members,
// aligned with it (nil for itself and for peers not in the table).
func (m *Mesh) votePeers() []*meshPeer {
	if m.ag.votePeers == nil || m.ag.peersGen != m.peersGen {
		ps := make([]*meshPeer, len(m.ag.vote))
		for i, mb := range m.ag.vote {
			if mb.ID != m.cfg.ID {
				ps[i] = m.peers[mb.ID]
			}
		}
		m.ag.votePeers, m.ag.peersGen = ps, m.peersGen
	}
	return m.ag.votePeers
}

// latestVote returns id's latest vote if it is about the current step.
func (m *Mesh) latestVote(id PeerID) *meshVote { return m.latestVoteOf(m.peers[id]) }

// latestVoteOf returns p's latest vote if it is about the current step.
func (m *Mesh) latestVoteOf(p *meshPeer) *meshVote {
	if p == nil {
		return nil
	}
	if v := p.votes.get(m.ag.step); v != nil && v.hash == m.ag.hash {
		return v
	}
	return nil
}
