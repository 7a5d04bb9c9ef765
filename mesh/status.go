package mesh

import (
	"maps"
	"slices"
)

// Status is a snapshot of the mesh for the REST API. It shares nothing with
// the Mesh.
type Status struct {
	ID       PeerID
	State    State
	Step     uint64 // outer step whose θ₀ this node holds (or fetches)
	Hash     string // θ₀ hash of Step, "" while joining with no model
	PrevHash string
	Round    uint32 // current agreement round
	Tick     uint64
	// Ring is the last decided ring (nil before the first).
	Ring *Ring
	// Fetch is the model being fetched while Syncing.
	Fetch *Fetch
	// Failures counts ReportFailure calls; Adoptions counts Adopt requests.
	Failures, Adoptions uint64
	// Newcomer: this node made none of its line's last MadeWindow models
	// while newcomers are limited (Config.AdmitRate); it is admitted to a
	// step when its turn comes.
	Newcomer bool
	// Waiting, when set: this node holds its first ring to the run's
	// minimum (Config.MinMembers) and is below it.
	Waiting *Waiting
	// Peers, sorted by ID.
	Peers []PeerStatus
}

// PeerStatus is this node's view of one peer.
type PeerStatus struct {
	ID         PeerID
	State      State
	Step       uint64
	Hash       string
	InnerSteps uint32
	LastSeen   uint64 // tick of its last message
	// Incarnation is the peer's latest; Restarts counts the changes seen.
	Incarnation, Restarts uint64
	Dead                  bool
	Addrs                 []string
}

// Status returns a snapshot of the mesh.
func (m *Mesh) Status() Status {
	s := Status{
		ID: m.cfg.ID, State: m.state, Step: m.step, Hash: m.hash, PrevHash: m.prevHash,
		Round: m.ag.round, Tick: m.tick, Failures: m.failures, Adoptions: m.adoptions,
		Newcomer: m.Newcomer(), Waiting: m.waiting(),
	}
	if m.last != nil {
		r := *m.last
		r.Members, r.Weights = slices.Clone(r.Members), slices.Clone(r.Weights)
		s.Ring = &r
	}
	if m.fetch != nil {
		f := *m.fetch
		f.From = slices.Clone(f.From)
		s.Fetch = &f
	}
	for _, id := range slices.Sorted(maps.Keys(m.peers)) {
		p := m.peers[id]
		s.Peers = append(s.Peers, PeerStatus{
			ID: id, State: p.state, Step: p.step, Hash: p.hash, InnerSteps: p.inner,
			LastSeen: p.lastSeen, Dead: p.dead, Addrs: slices.Clone(p.addrs),
			Incarnation: p.incarnation, Restarts: p.restarts,
		})
	}
	return s
}

// State returns the node's state; cheaper than Status for polling.
func (m *Mesh) State() State { return m.state }

// Fetching returns the model this node is asked to fetch (step, hash) while
// Syncing, ok false otherwise; cheaper than Status for polling.
func (m *Mesh) Fetching() (step uint64, hash string, ok bool) {
	if m.state != StateSyncing || m.fetch == nil {
		return 0, "", false
	}
	return m.fetch.Step, m.fetch.Hash, true
}

// Model returns the outer step and θ₀ hash of the model this node holds
// ("" while joining with none); cheaper than Status for polling.
func (m *Mesh) Model() (step uint64, hash string) { return m.step, m.hash }
