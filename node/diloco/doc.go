// Package diloco is one member's DiLoCo loop (Douillard et al. 2023), the
// one loop a node runs over the network and an in-process run runs for
// each of its members. Phase t trains H inner steps from where phase t−1
// ended (E_{t−1}, or the global model G_t), then:
//
//	Δ_t = G_t − E_t            this member's pseudo-gradient (delta)
//	Δ̄_t = weighted mean of the members' Δ_t, over the ring (avg)
//	G_{t+1} = outer(G_t, Δ̄_t)  the outer optimizer (Model.Advance, Outer)
//
// Δ̄_t is applied Lag inner steps into phase t+1. With lag 0 (blocking) the
// engine then restarts from G_{t+1} exactly. With lag > 0, or lag < 0 (the
// first inner step at which the average has arrived), the average runs
// while those steps do, and the local model is rebased onto the new global
// one: θ ← θ + (G_{t+1} − E_t) (Rebase), so it keeps the progress it made
// since E_t (Streaming DiLoCo's overlap, Douillard et al. 2025). The model
// hash, eval loss and checkpoints are G's.
//
// # Driving a loop
//
// A Loop owns the engine (train.Engine) while it runs, Δ, Δ̄, E and the
// error-feedback residual pair; the global model (Model) is shared with
// readers such as a checkpoint donor. It sees the rest through three
// narrow interfaces: a Reducer runs one attempt of the average over a
// decided ring; a Port carries Ready, Completed and Failed to membership,
// brings decided rings and fetch requests (Events), and fetches models;
// Hooks hear of every inner step and every commit:
//
//	m := diloco.NewModel(step, theta0, diloco.NewOuter(len(theta0), lr, mu))
//	l, err := diloco.New(diloco.Config{Inner: h, Lag: lag, Eval: true}, engine, m, reducer, port, hooks)
//	err = l.Run(ctx) // ctx.Err(), or ErrDone at Config.MaxOuter
//
// Run starts a reduce worker, the one reader of Port.Events: for each step
// the loop hands it, it waits for the step's ring, calls Reducer.Attempt
// with collective.Buffers{Src: Δ, Dst: Δ̄, ResIn, ResOut}, and on failure
// reports the culprit (Reducer.Failed, Port.Failed) and waits for the next
// ring; a fetch request ends the step instead, and the loop replaces its
// model by the one Port.Fetch returns (the residual restarts at zero).
//
// # In one process
//
// RunLocal runs M members in one process, each a Loop with its own
// train.Trainer, concurrently: an in-memory port decides a ring of all of
// them once all are Ready, and in-memory reducers run the collectives' own
// code (Averaging: the ring all-reduce, the robust direct scatter with the
// exclusion rule, or the plain float32 mean, optionally altered by an
// attack). Member 0 alone evaluates the global model. Given the options,
// worker ids and averaging of a network run, it computes the network's
// bits; the network tests and convergence sweeps use it.
package diloco
