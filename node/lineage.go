package node

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/intellect-node/intellect-node/mesh"
)

// lineHistory is who made the last models of this node's line
// (mesh.History), for the model of one step and hash: donors hand it to a
// joiner with the model, checkpoints keep it, and the mesh admits newcomers
// — peers named in none of it — a few per step (docs/mesh-defence.md "Admission").
type lineHistory struct {
	mu   sync.Mutex
	step uint64
	hash string
	made []mesh.Made
}

// set records the history of the model (step, hash) (mesh goroutine).
func (h *lineHistory) set(step uint64, hash string, made []mesh.Made) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.step, h.hash, h.made = step, hash, made
}

// of returns the history of the model (step, hash), and false if the mesh
// has not recorded it yet (the caller's model moved on before the mesh).
func (h *lineHistory) of(step uint64, hash string) ([]mesh.Made, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.step != step || h.hash != hash || hash == "" {
		return nil, false
	}
	return h.made, true
}

// noteHistory records the mesh's history when its model changed (mesh
// goroutine: at its start and after each command).
func (n *Node) noteHistory(m *mesh.Mesh) {
	step, hash := m.Model()
	if _, ok := n.history.of(step, hash); ok || hash == "" {
		return
	}
	n.history.set(step, hash, m.History())
}

// snapshotState is the JSON a donor's snapshot carries beside θ₀ and v.
type snapshotState struct {
	Run      string      `json:"run"`
	Manifest string      `json:"manifest"`
	Step     uint64      `json:"step"`
	Params   int64       `json:"params"`
	History  []mesh.Made `json:"history,omitempty"`
}

// fetchedHistory reads the line history a donor sent with the model of
// step (a peer's bytes): nil, with the reason, if it is missing or
// invalid — the mesh then admits as if the line had no history.
func fetchedHistory(state []byte, step uint64) ([]mesh.Made, error) {
	var st snapshotState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("snapshot state: %w", err)
	}
	if st.History == nil {
		return nil, nil
	}
	if err := mesh.ValidateHistory(step, st.History); err != nil {
		return nil, err
	}
	return st.History, nil
}

// openAdmitRate is the mesh's AdmitRate in a run anyone may join: at most a
// quarter of the established members (at least one) join a step as
// newcomers, so that a flood of made-up peers needs many steps, and the
// probation audits (audit.go), to become the majority of a ring. Runs whose
// peers hold the pre-shared key or a creator's ticket admit everyone.
const openAdmitRate = 0.25

// admitRate is the mesh's AdmitRate under the run's admission policy.
func (r *runManifest) admitRate() float64 {
	if r.m.Admission.Policy == AdmissionOpen {
		return openAdmitRate
	}
	return 0
}
