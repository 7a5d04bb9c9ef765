package node

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/intellect-node/intellect-node/mesh"
)

// inflight tracks the all-reduce attempt running now, so that the mesh
// goroutine can abort it when the mesh declares one of its members dead
// instead of letting it run into its timeout.
type inflight struct {
	mu     sync.Mutex
	ring   *mesh.Ring
	cancel context.CancelCauseFunc
}

// deadMemberError is the cause of an attempt aborted because a member died.
type deadMemberError struct{ peer mesh.PeerID }

func (e *deadMemberError) Error() string {
	return fmt.Sprintf("node: ring member %s declared dead", e.peer)
}

// begin registers the attempt over r and returns its context.
func (f *inflight) begin(ctx context.Context, r *mesh.Ring) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	f.mu.Lock()
	f.ring, f.cancel = r, cancel
	f.mu.Unlock()
	return ctx
}

// end unregisters the attempt.
func (f *inflight) end() {
	f.mu.Lock()
	if f.cancel != nil {
		f.cancel(nil)
	}
	f.ring, f.cancel = nil, nil
	f.mu.Unlock()
}

// abortIfMember cancels the attempt if one of dead is a member of its ring.
func (f *inflight) abortIfMember(dead []mesh.PeerID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ring == nil {
		return
	}
	for _, d := range dead {
		if slices.Contains(f.ring.Members, d) {
			f.cancel(&deadMemberError{peer: d})
			return
		}
	}
}
