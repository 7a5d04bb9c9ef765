package diloco

import (
	"context"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/train"
)

// Port is all a Loop sees of membership: typed commands in, decided rings
// and fetch requests out, and the fetch itself. A node's port talks to its
// mesh goroutine and downloads from donors; an in-process run's port
// decides rings of all its members and copies models between them.
//
// Every method but Events is called on the loop's goroutine, except Ready
// and Failed, which the loop's reduce worker calls too; none is called
// concurrently with itself.
type Port interface {
	// Ready tells the mesh this member finished inner steps of step.
	Ready(step uint64, inner int)
	// Completed tells it step's average is applied: the model is hash.
	Completed(step uint64, hash string)
	// Failed reports a failed attempt over r, blaming culprit.
	Failed(r *mesh.Ring, culprit mesh.PeerID)
	// SetStragglerTicks sets how long a ring waits for a late member.
	SetStragglerTicks(ticks int)
	// CaughtUp reports whether every other member of the last ring is seen
	// at this member's step or beyond, or gone (false when ctx ends first).
	CaughtUp(ctx context.Context) bool
	// Events delivers decided rings, fetch requests and closes. The loop's
	// reduce worker is its one reader.
	Events() <-chan Event
	// Closed reports whether step closed (close.go) by the time this
	// member finished inner steps of its phase, by a clock of the port's
	// own (an in-process run's simulated speeds); a port whose closes come
	// as Event.Close says false.
	Closed(step uint64, inner int) bool
	// Fetch gets the model ev.Fetch names. It returns nil and no error
	// when the fetch failed and the mesh was told so (it asks again), or
	// the mesh no longer asks for it; an error ends the loop.
	Fetch(ctx context.Context, ev Event) (*Fetched, error)
	// Synced tells the mesh a fetched model (step, hash) is now this
	// member's; history is the Fetched's.
	Synced(step uint64, hash string, history []mesh.Made)
}

// Event is something the mesh asks of the loop: the ring of a step, a
// model fetch, or the end of a phase (the step closed).
type Event struct {
	Ring  *mesh.Ring
	Fetch *mesh.Fetch
	Adopt bool        // Fetch adopts a larger side's model
	Close *mesh.Close // end the phase of Close.Step at the next boundary
}

// Fetched is a model a Port fetched: the global model of Step. The loop
// takes ownership of the slices.
type Fetched struct {
	Step     uint64
	Theta0   []float32
	Momentum []float32 // the outer optimizer's v
	// History is who made the line's last models, as the donors tell it;
	// the loop hands it back to Port.Synced.
	History []mesh.Made
}

// Reducer runs one attempt of the average over a decided ring: b.Dst ← the
// weighted mean of the members' vectors, this member's being b.Src, with
// b.ResIn and b.ResOut the error-feedback residuals (nil without). A failed
// attempt leaves b.Src and b.ResIn as they were. Both methods are called on
// the loop's reduce worker.
type Reducer interface {
	Attempt(ctx context.Context, r *mesh.Ring, b collective.Buffers) (Stats, error)
	// Failed records a failed attempt and names the member to blame.
	Failed(r *mesh.Ring, err error) mesh.PeerID
}

// Stats counts the bytes of one successful attempt.
type Stats struct {
	BytesSent, BytesRecv int64
}

// Hooks are what the loop reports. They are called on the loop's
// goroutine, which waits for them.
type Hooks interface {
	// InnerDone is called after each inner step (inner is 1-based within
	// the phase).
	InnerDone(inner int, st train.StepStats)
	// Committed is called once the global model of c.Step is this
	// member's.
	Committed(c Commit)
	// Synced is called once a fetched model, the global model of step, is
	// this member's (after Port.Synced).
	Synced(step uint64, hash string)
}

// Commit describes a global model a member made: the average that made it
// and the member's work since its last one.
type Commit struct {
	Step     uint64     // the new model's step
	Hash     string     // its hash (train.Hash)
	Ring     *mesh.Ring // the ring of the attempt that succeeded
	Stats    Stats      // that attempt's bytes
	Attempts int        // attempts of the step, the successful one included
	Took     time.Duration
	// Tokens are the training tokens of the phase this member contributed.
	Tokens int64
	// Start is when this member's work towards the commit began (the last
	// commit or fetch); Compute the inner steps' and the evaluation's time
	// since.
	Start   time.Time
	Compute time.Duration
	// Loss is the mean training loss of the Steps inner steps since Start.
	Loss  float64
	Steps int
	// Eval is the held-out loss of the new model, when Config.Eval is set
	// (else 0).
	Eval float64
	// Update is the averaged pseudo-gradient Δ̄ that made this model of the
	// last one; valid only during Hooks.Committed (copy it to keep it).
	Update []float32
}
