package diloco

// An early close. Under the mesh's close rule (mesh.Config.CloseFraction)
// a step closes once enough of the run's work is done, and a member still
// training it ends its phase with the inner steps it finished: that is its
// weight in the ring, as a joiner's partial phase is. The mesh says so by
// Event.Close, which the reduce worker reads while the loop trains; an
// in-process run's port says so by Port.Closed, asked at each inner-step
// boundary (its clock is simulated). The loop acts on a close at the first
// inner-step boundary at which no average is pending: the phase's Δ is
// taken against the global model it trains from, so in overlapped mode a
// close that comes before the previous step's average is applied ends the
// phase at the boundary where it is.

// closeSeen records, on the reduce worker, that the mesh closed step.
func (l *Loop) closeSeen(step uint64) {
	for {
		seen := l.closed.Load()
		if seen >= step+1 || l.closed.CompareAndSwap(seen, step+1) {
			return
		}
	}
}

// closes reports whether the phase of the model's step ends after inner
// steps: the step closed, and the phase is not whole already.
func (l *Loop) closes(inner int) bool {
	step := l.model.step // the loop's goroutine is the model's one writer
	return inner < l.cfg.Inner && (l.closed.Load() == step+1 || l.port.Closed(step, inner))
}
