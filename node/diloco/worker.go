package diloco

import (
	"context"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
)

// outcome is how the average of one step ended.
type outcome struct {
	step     uint64
	ring     *mesh.Ring // the ring of the attempt that succeeded
	stats    Stats
	attempts int
	tokens   int64         // of the phase reduced
	took     time.Duration // from Ready to the average
	fetch    *Event        // the mesh asked for a model fetch instead
	err      error
}

// pending is an average handed to the worker and not applied yet.
type pending struct {
	res <-chan outcome
	out *outcome
}

// arrived reports, without waiting, whether the average has ended.
func (p *pending) arrived() bool {
	if p.out != nil {
		return true
	}
	select {
	case o := <-p.res:
		p.out = &o
		return true
	default:
		return false
	}
}

// wait returns the outcome once the average has ended.
func (p *pending) wait(ctx context.Context) (outcome, error) {
	if p.out == nil {
		select {
		case o := <-p.res:
			p.out = &o
		case <-ctx.Done():
			return outcome{}, ctx.Err()
		}
	}
	return *p.out, p.out.err
}

// worker is the one reader of the port's events. It runs the average of
// each step the loop hands it — waits for the step's ring, runs an attempt,
// reports the culprit and waits for the next ring on failure — and keeps a
// fetch the mesh asks for while it has no step to reduce.
type worker struct {
	l       *Loop
	jobs    chan job
	res     chan outcome
	polls   chan chan *Event
	cancel  context.CancelFunc
	stopped chan struct{}

	// Owned by the worker goroutine.
	ring  *mesh.Ring
	fetch *Event
}

// job is the average of step after inner steps.
type job struct {
	step   uint64
	inner  int
	tokens int64
	start  time.Time
}

func startWorker(ctx context.Context, l *Loop) *worker {
	ctx, cancel := context.WithCancel(ctx)
	w := &worker{l: l, jobs: make(chan job), res: make(chan outcome, 1), polls: make(chan chan *Event),
		cancel: cancel, stopped: make(chan struct{})}
	go w.loop(ctx)
	return w
}

// stop ends the worker and waits for it (an attempt in flight is cancelled).
func (w *worker) stop() {
	w.cancel()
	<-w.stopped
}

// start tells the mesh this member is Ready for step and hands the worker
// its average.
func (w *worker) start(step uint64, inner int, tokens int64) *pending {
	w.l.port.Ready(step, inner)
	select {
	case w.jobs <- job{step: step, inner: inner, tokens: tokens, start: time.Now()}:
	case <-w.stopped:
	}
	return &pending{res: w.res}
}

// pollFetch returns the fetch the mesh asked for since the last poll, if any.
func (w *worker) pollFetch() *Event {
	reply := make(chan *Event, 1)
	select {
	case w.polls <- reply:
		return <-reply
	case <-w.stopped:
		return nil
	}
}

func (w *worker) loop(ctx context.Context) {
	defer close(w.stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.l.port.Events():
			w.note(ev)
		case reply := <-w.polls:
			reply <- w.fetch
			w.fetch = nil
		case j := <-w.jobs:
			w.res <- w.run(ctx, j)
		}
	}
}

// note remembers an event: a fetch or a ring for the average, a close
// for the loop.
func (w *worker) note(ev Event) {
	if ev.Close != nil {
		w.l.closeSeen(ev.Close.Step)
		return
	}
	if ev.Fetch != nil {
		w.fetch = &ev
		return
	}
	w.ring = ev.Ring
}

// run reduces step j.step: Δ (l.delta) into Δ̄ (l.avg), retrying with each
// new ring after a failure, until it succeeds, the mesh asks for a fetch
// or ctx ends.
func (w *worker) run(ctx context.Context, j job) outcome {
	l := w.l
	out := outcome{step: j.step, tokens: j.tokens}
	for {
		if w.fetch != nil {
			out.fetch, w.fetch = w.fetch, nil
			return out
		}
		if r := w.ring; r != nil && r.Step == j.step {
			w.ring = nil
			out.attempts++
			b := collective.Buffers{Src: l.delta, Dst: l.avg, ResIn: l.res[0], ResOut: l.res[1]}
			stats, err := l.reduce.Attempt(ctx, r, b)
			if err == nil {
				l.res[0], l.res[1] = l.res[1], l.res[0]
				out.ring, out.stats, out.took = r, stats, time.Since(j.start)
				return out
			}
			if ctx.Err() != nil {
				out.err = ctx.Err()
				return out
			}
			l.port.Failed(r, l.reduce.Failed(r, err))
			continue
		}
		select {
		case <-ctx.Done():
			out.err = ctx.Err()
			return out
		case ev := <-l.port.Events():
			w.note(ev)
		}
	}
}
