package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/internal/soak"
	"github.com/intellect-node/intellect-node/train"
)

// Scenario deadlines and settings.
const (
	// joinDeadline bounds how long a scenario's joiner may take to train.
	joinDeadline = 3 * time.Minute
	// donorRate is a donor-kill joiner's link rate, as a fraction: slow
	// enough that the model takes several seconds to arrive, fast enough
	// that it arrives well within an outer step. The links are scaled to
	// the model (wan.RateScale), so the snapshot (θ₀ and v, 8 bytes a
	// parameter) takes 2.25 s over one path at the full rate whatever the
	// model: 4.5 s at 0.5, an outer step being 10 s of compute (H = 5
	// inner steps of 2 s), overlapped. A joiner whose download takes
	// longer than a step never catches up (docs/soak.md): at 0.25 the
	// downloads took 10–14 s and it fetched step after step for 3 min; at
	// 0.03, 73–122 s.
	donorRate = 0.5
	// fillerName is the file that fills the tmpfs home.
	fillerName = "soak-filler"
	// diskCheckpointEvery is the tmpfs member's --checkpoint-every: often
	// enough that the full disk meets a checkpoint within a short run.
	diskCheckpointEvery = 2
)

// claimSlot takes a free slot for a scenario's joiner and marks it busy,
// making a churnable member leave when every slot is taken; with none to
// be had the event is counted as skipped. It locks; the lock is released
// when it returns.
func (r *runner) claimSlot(ev soak.Event) (*slot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := ev.Target(r.emptySlots())
	if !ok {
		if i, ok = ev.Target(r.churnable()); !ok {
			r.rep.Skipped[ev.Kind]++
			return nil, false
		}
		r.note("%s leaves to make room for the %s joiner", r.slots[i].member(), ev.Kind)
		r.leave(r.slots[i])
	}
	r.slots[i].busy = true
	return r.slots[i], true
}

// until polls cond (lock held while it runs) every 200 ms until it holds,
// d passes (false) or ctx ends (false).
func (r *runner) until(ctx context.Context, d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return r.waitFor(ctx, cond) == nil
}

// trained reports whether slot s's member holds a model (no download in
// progress) and was in a decided ring with others. Lock held.
func trained(s *slot) bool {
	d := s.status.Download
	return s.state == up && (d == nil || d.BytesDone == d.BytesTotal) && s.status.OuterStep > 0 &&
		len(s.status.Members) > 1 && slices.Contains(s.status.Members, s.id)
}

// doSkew starts a member whose wall clock is ev.Skew off and checks that it
// trains in the network's rings.
func (r *runner) doSkew(ctx context.Context, ev soak.Event) {
	s, ok := r.claimSlot(ev)
	if !ok {
		return
	}
	r.mu.Lock()
	r.rep.Injected[ev.Kind]++
	err := r.startFresh(s.i, ev.Skew, false)
	r.note("clock skew: %s starts with its clock %v off", s.member(), ev.Skew)
	r.mu.Unlock()
	if err != nil {
		r.locked(func() { r.fail("clock skew: start %s: %v", s.member(), err) })
		return
	}
	start := r.now()
	ok = r.until(ctx, joinDeadline, func() bool { return trained(s) })
	r.locked(func() {
		s.busy = false
		if ok {
			r.note("clock skew: %s (%v) trained in a ring of %d after %v", s.member(), ev.Skew, len(s.status.Members), (r.now() - start).Round(time.Second))
			return
		}
		r.unfinished(ctx, "clock skew: %s (%v) not in a ring %v after its start: %s", s.member(), ev.Skew, (r.now() - start).Round(time.Second), statusJSON(s.status))
	})
}

// unfinished records a scenario that did not get where it should: a
// failure, unless the fault phase ended first (ctx is the scenario's,
// which ends with it): then a note.
func (r *runner) unfinished(ctx context.Context, format string, a ...any) {
	if ctx.Err() != nil {
		r.note("unfinished when the fault phase ended: "+format, a...)
		return
	}
	r.fail(format, a...)
}

// locked runs f with the lock held.
func (r *runner) locked(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// doStorm makes every churnable member leave at once, then starts up to
// StormJoiners members at once, and checks that each trains in a ring.
// Churn leaves the joiners alone until then, as it does every scenario's
// joiner: killed and restarted with no checkpoint, a joiner starts over
// (one was killed 8 times in the storm's 6 minutes, soak seed 1).
func (r *runner) doStorm(ctx context.Context, ev soak.Event) {
	r.mu.Lock()
	r.rep.Injected[ev.Kind]++
	victims := r.churnable()
	r.stopMany(victims)
	free := r.emptySlots()
	free = free[:min(len(free), soak.StormJoiners)]
	var joiners []*stormJoiner
	for _, i := range free {
		if err := r.startFresh(i, 0, false); err != nil {
			r.fail("storm: start on %s: %v", r.slots[i].host, err)
			continue
		}
		r.slots[i].busy = true
		joiners = append(joiners, &stormJoiner{s: r.slots[i], gen: r.slots[i].gen})
	}
	r.note("storm: %d members left at once, %d joiners started at once", len(victims), len(joiners))
	r.mu.Unlock()
	start := r.now()
	ok := r.until(ctx, 2*joinDeadline, func() bool { return stormTrained(joiners) })
	r.locked(func() {
		for _, j := range joiners {
			if j.s.gen == j.gen {
				j.s.busy = false
			}
		}
		if ok {
			r.note("storm: every joiner still running trained in a ring within %v", (r.now() - start).Round(time.Second))
			return
		}
		r.unfinished(ctx, "storm: joiners not in a ring %v after they started", (r.now() - start).Round(time.Second))
	})
}

// stormJoiner is one member a storm started: its slot, the slot's
// generation then, and whether it has trained since.
type stormJoiner struct {
	s       *slot
	gen     int
	trained bool
}

// stormTrained notes which joiners train now and reports whether each one
// still running has trained at some poll since the storm: one that trained
// and then sat steps out (a partition, a flap) has joined. A slot whose
// joiner exited holds a joiner no more. Lock held.
func stormTrained(joiners []*stormJoiner) bool {
	all := true
	for _, j := range joiners {
		if j.s.gen != j.gen || j.s.state != up {
			continue
		}
		j.trained = j.trained || trained(j.s)
		all = all && j.trained
	}
	return all
}

// stopMany sends SIGINT to the members of slots at once, waits for them
// (each bounded by leaveTimeout) and frees the slots. Lock held (released
// while waiting).
func (r *runner) stopMany(slots []int) {
	var wg sync.WaitGroup
	for _, i := range slots {
		s := r.slots[i]
		s.busy = true
		wg.Go(func() {
			r.mu.Lock()
			r.stop(s)
			r.free(s)
			r.mu.Unlock()
		})
	}
	r.mu.Unlock()
	wg.Wait()
	r.mu.Lock()
}

// doDonorKill starts a joiner on slow links, waits until its download
// runs, kills one of the members serving it, and checks that the joiner
// still gets the model and trains.
func (r *runner) doDonorKill(ctx context.Context, ev soak.Event) {
	j, ok := r.claimSlot(ev)
	if !ok {
		return
	}
	i := j.i
	r.locked(func() { r.setRate(i, donorRate) })
	before := r.ckptSent(ctx)
	r.locked(func() {
		if err := r.startFresh(i, 0, false); err != nil {
			r.fail("donor kill: start joiner on %s: %v", j.host, err)
		}
	})
	defer r.locked(func() { r.setRate(i, 0); j.busy = false })
	if !r.until(ctx, joinDeadline, func() bool { return j.status.Download != nil && j.status.Download.BytesDone > 0 || trained(j) }) {
		r.locked(func() { r.note("donor kill: %s never started its download", j.member()) })
		r.locked(func() { r.rep.Skipped[ev.Kind]++ })
		return
	}
	r.killDonor(ctx, ev, j, before)
}

// killDonor kills one of the members whose checkpoint-protocol bytes grew
// since before (the joiner's donors), then checks the joiner trains.
func (r *runner) killDonor(ctx context.Context, ev soak.Event, j *slot, before map[int]float64) {
	after := r.ckptSent(ctx)
	r.mu.Lock()
	var donors []int
	for i, v := range after {
		if s := r.slots[i]; v > before[i] && s != j && s.state == up && !s.busy && !s.longLived {
			donors = append(donors, i)
		}
	}
	d, ok := ev.Target(donors)
	if !ok || trained(j) {
		r.rep.Skipped[ev.Kind]++
		r.note("donor kill: no churnable donor serving %s mid-transfer (donors %v, trained %v)", j.member(), donors, trained(j))
		r.mu.Unlock()
		return
	}
	r.rep.Injected[ev.Kind]++
	r.note("donor kill: %s killed while serving %s (%s)", r.slots[d].member(), j.member(), statusJSON(j.status))
	start := r.now()
	r.killRestart(ctx, r.slots[d], ev.Dur)
	r.mu.Unlock()
	ok = r.until(ctx, joinDeadline, func() bool { return trained(j) })
	r.locked(func() {
		switch {
		case ok:
			r.note("donor kill: %s trained %v after its donor died", j.member(), (r.now() - start).Round(time.Second))
		case j.state == up:
			r.unfinished(ctx, "donor kill: %s not training %v after its donor died: %s", j.member(), (r.now() - start).Round(time.Second), statusJSON(j.status))
		}
	})
}

// ckptSent reads every running member's bytes sent on the checkpoint
// protocol (what donors serve), by slot.
func (r *runner) ckptSent(ctx context.Context) map[int]float64 {
	rs := map[int]float64{}
	r.mu.Lock()
	slots := r.running()
	r.mu.Unlock()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, i := range slots {
		wg.Go(func() {
			m, err := metrics(ctx, r.slots[i].hc, []string{ckptSentMetric})
			if err == nil {
				mu.Lock()
				rs[i] = m[ckptSentMetric]
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return rs
}

// doDiskFull fills the tmpfs home of diskSlot's member to leave half a
// checkpoint free, waits until a checkpoint fails on it, kills it and
// restarts it on the full disk (it must resume), then frees the space and
// checks that it writes checkpoints again.
func (r *runner) doDiskFull(ctx context.Context, ev soak.Event) {
	r.mu.Lock()
	s := r.slots[diskSlot]
	if s.state != up || !s.tmpfs {
		r.rep.Skipped[ev.Kind]++
		r.mu.Unlock()
		return
	}
	r.rep.Injected[ev.Kind]++
	s.busy = true
	r.exp = append(r.exp, soak.Expected{Member: s.member(), Contains: "no space left on device", Why: "disk full"})
	r.mu.Unlock()
	defer r.locked(func() { s.busy = false })
	if err := r.diskFull(ctx, s); err != nil {
		r.locked(func() { r.unfinished(ctx, "disk full: %s: %v", s.member(), err) })
	}
}

// diskFull is doDiskFull's sequence; it returns what went wrong.
func (r *runner) diskFull(ctx context.Context, s *slot) error {
	var ckptDir string
	if !r.until(ctx, joinDeadline, func() bool { ckptDir = newestCheckpointDir(s.home); return ckptDir != "" }) {
		return fmt.Errorf("no checkpoint written in %v", joinDeadline)
	}
	size := train.DirBytes(ckptDir)
	filled, err := soak.Fill(s.home, fillerName, size/2)
	if err != nil {
		return err
	}
	fails0 := r.memberMetric(ctx, s, "intellect_checkpoint_failures_total")
	r.locked(func() {
		r.note("disk full: %s's home filled (%d MiB) to leave half a checkpoint (%d MiB) at outer step %d", s.member(), filled>>20, size>>21, s.status.OuterStep)
	})
	// Topped up at each look: a member that pruned its oldest checkpoint
	// after a write finished just after the fill would have the room for
	// every later write (60 minutes, seed 1, ab015fe).
	topUpFailed := false
	if !r.until(ctx, 2*joinDeadline/3, func() bool {
		if _, err := soak.Fill(s.home, fillerName, size/2); err != nil && !topUpFailed {
			topUpFailed = true
			r.note("disk full: top-up of %s: %v", s.member(), err)
		}
		return r.memberMetricLocked(s, "intellect_checkpoint_failures_total") > fails0
	}) {
		return fmt.Errorf("no checkpoint failure counted within %v of filling the disk", 2*joinDeadline/3)
	}
	r.mu.Lock()
	step := s.status.OuterStep
	r.killRestart(ctx, s, time.Second)
	r.mu.Unlock()
	if !r.until(ctx, joinDeadline, func() bool { return s.state == up && s.status.OuterStep > step+1 }) {
		return fmt.Errorf("not training on the full disk after its restart: %s", statusJSON(s.status))
	}
	if err := os.Remove(filepath.Join(s.home, fillerName)); err != nil {
		return err
	}
	return r.checkpointsAgain(ctx, s)
}

// checkpointsAgain waits for slot s's member to write a checkpoint newer
// than its newest now.
func (r *runner) checkpointsAgain(ctx context.Context, s *slot) error {
	old := newestCheckpointDir(s.home)
	if !r.until(ctx, joinDeadline, func() bool { d := newestCheckpointDir(s.home); return d != "" && d > old }) {
		return fmt.Errorf("no checkpoint written within %v of freeing the disk (newest %s)", joinDeadline, filepath.Base(old))
	}
	r.locked(func() {
		r.note("disk full: %s wrote %s after the disk was freed", s.member(), filepath.Base(newestCheckpointDir(s.home)))
	})
	return nil
}

// memberMetric reads one unlabelled metric of slot s's member (-1 if it
// cannot be read).
func (r *runner) memberMetric(ctx context.Context, s *slot, name string) float64 {
	m, err := metrics(ctx, s.hc, []string{name})
	if v, ok := m[name]; err == nil && ok {
		return v
	}
	return -1
}

// memberMetricLocked is memberMetric with the lock held (it is released
// while reading).
func (r *runner) memberMetricLocked(s *slot, name string) float64 {
	r.mu.Unlock()
	defer r.mu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return r.memberMetric(ctx, s, name)
}
