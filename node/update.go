package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p/ckpt"
	"github.com/intellect-node/intellect-node/train"
)

// stepUpdate is the update of the last outer step this member made: the
// averaged pseudo-gradient Δ̄_t that took G_t to G_{t+1}. A member one step
// behind — it synced G_t while the line made G_{t+1}, or sat the step out —
// fetches it instead of the whole snapshot: about a byte a parameter,
// packed (ckpt.EncodeUpdate), instead of 8, and no wait for a full download
// to fall behind again. It applies the
// outer step itself and keeps the result only if it hashes to the line's
// G_{t+1} (a donor's wrong Δ̄ costs a fallback to the snapshot, nothing
// else).
type stepUpdate struct {
	mu       sync.Mutex
	t        uint64 // the step Δ̄ updates
	makes    string // the hash of G_{t+1}
	avg      []float32
	snap     *ckpt.Snapshot // encoded on the first request
	snapHist bool           // snap carries the line history
}

// keepUpdate keeps a copy of the update that made c's model (training
// goroutine).
func (n *Node) keepUpdate(c diloco.Commit) {
	if len(c.Update) == 0 || c.Step == 0 {
		return
	}
	u := &n.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	u.t, u.makes, u.snap = c.Step-1, c.Hash, nil
	u.avg = append(u.avg[:0], c.Update...)
}

// updateSnapshot returns what this member serves on ckpt.UpdateProtocolID:
// its last step's update with the line history of the model it makes, nil
// before its first step. Called concurrently by the donor's streams.
func (n *Node) updateSnapshot() *ckpt.Snapshot {
	u := &n.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.makes == "" {
		return nil
	}
	hist, histOK := n.history.of(u.t+1, u.makes)
	if u.snap == nil || histOK && !u.snapHist {
		state, _ := json.Marshal(snapshotState{Run: n.cfg.Run, Manifest: n.runID(), Step: u.t + 1, Params: n.params, History: hist})
		u.snap = ckpt.EncodeUpdate(u.t, u.makes, u.avg, state)
		u.snapHist = histOK
	}
	return u.snap
}

// fetchUpdate makes the model f names from this node's model and the step
// update of f's donors, when f is one step past it on the same line. It
// returns nil when it cannot (the caller then fetches the snapshot).
func (n *Node) fetchUpdate(ctx context.Context, f *mesh.Fetch) *diloco.Fetched {
	var theta0, v []float32
	n.model.Read(func(step uint64, hash string, th, mom []float32) {
		if step+1 == f.Step && f.PrevHash != "" && hash == f.PrevHash {
			theta0, v = slices.Clone(th), slices.Clone(mom)
		}
	})
	if theta0 == nil {
		return nil
	}
	start := time.Now()
	// Packed, Δ̄ takes at most 4n+5 bytes; the state JSON fits the MiB.
	data, bad, err := ckpt.Fetch(ctx, n.host.Libp2p(), n.reachableDonors(f.From),
		ckpt.FetchSpec{Step: f.Step - 1, Hash: f.Hash, Run: n.runKey()},
		ckpt.FetchConfig{MaxBytes: 4*n.params + 1<<20, Logger: n.cfg.Logger, Update: true, BusyRetries: -1}, n.fetchProgress())
	var state []byte
	if err == nil {
		state, err = n.applyUpdate(theta0, v, data, f.Hash)
	}
	if err != nil {
		n.log.Info("no step update; fetching the snapshot", "step", f.Step, "err", err, "bad_donors", len(bad))
		return nil
	}
	hist := n.fetchSucceeded(f, state, start)
	n.log.Info("model synced by the step's update", "step", f.Step, "hash", short(f.Hash), "bytes", len(data), "took", fmtDur(time.Since(start)))
	return &diloco.Fetched{Step: f.Step, Theta0: theta0, Momentum: v, History: hist}
}

// applyUpdate applies the fetched update container data to θ₀ and v (in
// place) with this run's outer optimizer and checks that the model it
// makes hashes to makes. It returns the container's state JSON.
func (n *Node) applyUpdate(theta0, v []float32, data []byte, makes string) ([]byte, error) {
	avg, state, err := ckpt.DecodeUpdate(data)
	if err != nil {
		return nil, err
	}
	if len(avg) != len(theta0) {
		return nil, fmt.Errorf("an update of %d values, the model has %d", len(avg), len(theta0))
	}
	o := n.model.Outer()
	(&diloco.Outer{LR: o.LR, Momentum: o.Momentum, V: v}).Apply(theta0, theta0, avg)
	if train.Hash(theta0) != makes {
		return nil, errors.New("the update does not make the line's model")
	}
	return state, nil
}
