package main

import (
	"context"
	"fmt"
	"time"

	"github.com/intellect-node/intellect-node/internal/soak"
	"github.com/intellect-node/intellect-node/internal/wan"
)

// linkState is what the faults in effect do to the links: pairs of slots
// cut by partitions (a count: partitions may overlap), the slots on the
// minority side of one, slots whose links are flapped down, slots whose
// rates are cut.
type linkState struct {
	cut   map[[2]int]int
	sides map[int]int
	down  map[int]bool
	rate  map[int]float64
}

func newLinkState() linkState {
	return linkState{cut: map[[2]int]int{}, sides: map[int]int{}, down: map[int]bool{}, rate: map[int]float64{}}
}

func pair(a, b int) [2]int { return [2]int{min(a, b), max(a, b)} }

// basePath is the profile's path between slots a and b.
func (r *runner) basePath(a, b int) wan.Path {
	ha, hb := r.net.Hosts[a].Name, r.net.Hosts[b].Name
	for _, p := range r.c.profile.Paths {
		if p.A == ha && p.B == hb || p.A == hb && p.B == ha {
			return p
		}
	}
	return *r.c.profile.Default
}

// apply sets the link between slots a and b from the faults in effect.
// Lock held.
func (r *runner) apply(a, b int) {
	p := r.basePath(a, b)
	if r.links.cut[pair(a, b)] > 0 || r.links.down[a] || r.links.down[b] {
		p.Loss = 1
	}
	f := 1.0
	for _, s := range []int{a, b} {
		if v, ok := r.links.rate[s]; ok {
			f = min(f, v)
		}
	}
	p.RateMbit *= f
	if err := r.net.SetPath(r.net.Hosts[a].Name, r.net.Hosts[b].Name, p); err != nil {
		r.fail("set link %s–%s: %v", r.net.Hosts[a].Name, r.net.Hosts[b].Name, err)
	}
}

// applySlot re-applies every link of slot i. Lock held.
func (r *runner) applySlot(i int) {
	for j := range r.slots {
		if j != i {
			r.apply(i, j)
		}
	}
}

// inject starts each event of the plan at its time, each in its own
// goroutine joined by r.events, until the plan ends or ctx does.
func (r *runner) inject(ctx context.Context, plan []soak.Event) {
	for _, ev := range plan {
		if r.sleepUntil(ctx, ev.At) != nil {
			return
		}
		r.events.Go(func() { r.do(ctx, ev) })
	}
}

// do carries out one event. Scenarios that wait on members end with the
// fault phase (what is unfinished then is noted, not failed).
func (r *runner) do(ctx context.Context, ev soak.Event) {
	ctx, cancel := context.WithDeadline(ctx, r.t0.Add(r.rep.Faults.To))
	defer cancel()
	switch ev.Kind {
	case soak.Kill:
		r.doKill(ctx, ev)
	case soak.Join:
		r.doJoin(ev)
	case soak.Leave:
		r.doLeave(ev)
	case soak.Partition:
		r.doPartition(ctx, ev)
	case soak.Flap:
		r.doFlap(ctx, ev)
	case soak.RateDrop:
		r.doRateDrop(ctx, ev)
	case soak.DiskFull:
		r.doDiskFull(ctx, ev)
	case soak.Skew:
		r.doSkew(ctx, ev)
	case soak.DonorKill:
		r.doDonorKill(ctx, ev)
	case soak.Storm:
		r.doStorm(ctx, ev)
	}
}

// churnable lists the slots churn may kill or make leave. Lock held.
func (r *runner) churnable() []int {
	var out []int
	for _, s := range r.slots {
		if s.state == up && !s.busy && !s.longLived {
			out = append(out, s.i)
		}
	}
	return out
}

// emptySlots lists the slots without a member whose links are up: a new
// member cut off from every other cannot fetch the run's manifest, and
// exits saying so. Lock held.
func (r *runner) emptySlots() []int {
	var out []int
	for _, s := range r.slots {
		if s.state == empty && !s.busy && !r.isolated(s.i) {
			out = append(out, s.i)
		}
	}
	return out
}

// isolated reports whether slot i's links are down or it is on the
// minority side of a partition. Lock held.
func (r *runner) isolated(i int) bool {
	return r.links.down[i] || r.links.sides[i] > 0
}

// running lists the slots whose member runs. Lock held.
func (r *runner) running() []int {
	var out []int
	for _, s := range r.slots {
		if s.state == up {
			out = append(out, s.i)
		}
	}
	return out
}

// doKill kills a churnable member and restarts it with its home after
// ev.Dur.
func (r *runner) doKill(ctx context.Context, ev soak.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := ev.Target(r.churnable())
	if !ok {
		r.rep.Skipped[ev.Kind]++
		return
	}
	r.rep.Injected[ev.Kind]++
	r.killRestart(ctx, r.slots[i], ev.Dur)
}

// killRestart kills slot s's member, checks the checkpoint it leaves, and
// restarts it with the same home after downFor. Lock held (released while
// waiting).
func (r *runner) killRestart(ctx context.Context, s *slot, downFor time.Duration) {
	wasBusy := s.busy
	s.busy = true
	defer func() { s.busy = wasBusy }()
	r.kill(s)
	i := r.noteKill(s)
	r.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(downFor):
	}
	r.mu.Lock()
	if r.closed || ctx.Err() != nil {
		return
	}
	r.awaitResume(s, i)
	// Until it has caught up, it holds the model of its checkpoint, which
	// may come from the far side of a partition.
	r.rep.Windows = append(r.rep.Windows, soak.Window{Interval: soak.Interval{From: r.now(), To: r.now()}, Member: s.member()})
	if err := r.startProc(s); err != nil {
		r.fail("restart %s: %v", s.member(), err)
		s.state = empty
	}
}

// noteKill checks the newest checkpoint that killed slot s's member left
// and records the resume it must make: the index of its Resumes entry.
// Lock held.
func (r *runner) noteKill(s *slot) int {
	rs := soak.Resume{Member: s.member(), At: r.now()}
	step, has, err := newestCheckpoint(s.home)
	rs.Checkpoint, rs.HasCheckpoint = step, has
	if err != nil {
		rs.Err = fmt.Sprintf("newest checkpoint after kill -9: %v", err)
	}
	r.rep.Resumes = append(r.rep.Resumes, rs)
	return len(r.rep.Resumes) - 1
}

// awaitResume makes the first status of slot s's restarted member settle
// Resumes[i], its own kill's entry (other kills append theirs while it is
// down). Lock held.
func (r *runner) awaitResume(s *slot, i int) {
	if r.rep.Resumes[i].Err == "" {
		s.resume = i
	}
}

// doJoin starts a new member on a free slot.
func (r *runner) doJoin(ev soak.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := ev.Target(r.emptySlots())
	if !ok || len(r.running()) >= r.c.Max {
		r.rep.Skipped[ev.Kind]++
		return
	}
	r.rep.Injected[ev.Kind]++
	if err := r.startFresh(i, 0, false); err != nil {
		r.fail("join on %s: %v", r.slots[i].host, err)
	}
}

// doLeave makes a churnable member leave gracefully, keeping the members
// at least c.Initial.
func (r *runner) doLeave(ev soak.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := ev.Target(r.churnable())
	if !ok || len(r.running()) <= r.c.Initial {
		r.rep.Skipped[ev.Kind]++
		return
	}
	r.rep.Injected[ev.Kind]++
	r.leave(r.slots[i])
}

// leave makes slot s's member leave and frees the slot. Lock held
// (released while waiting).
func (r *runner) leave(s *slot) {
	s.busy = true
	r.stop(s)
	r.free(s)
}

// doPartition cuts a random side of the running members from every other
// slot for ev.Dur, then heals, and records the partition.
func (r *runner) doPartition(ctx context.Context, ev soak.Event) {
	r.mu.Lock()
	side := ev.Side(r.running())
	if len(side) == 0 {
		r.rep.Skipped[ev.Kind]++
		r.mu.Unlock()
		return
	}
	r.rep.Injected[ev.Kind]++
	rec := soak.PartitionRecord{At: r.now()}
	r.cutSide(side, 1)
	for _, i := range side {
		rec.Side = append(rec.Side, r.slots[i].member())
	}
	r.note("partition: %v cut from the rest for %v", rec.Side, ev.Dur.Round(time.Second))
	r.mu.Unlock()
	wait(ctx, ev.Dur)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cutSide(side, -1)
	rec.Healed = r.now()
	r.rep.Partitions = append(r.rep.Partitions, rec)
	r.rep.Windows = append(r.rep.Windows, soak.Window{Interval: soak.Interval{From: rec.At, To: rec.Healed}})
}

// cutSide adds d to the cut count of every pair between side and the other
// slots, and applies them. Lock held.
func (r *runner) cutSide(side []int, d int) {
	in := map[int]bool{}
	for _, i := range side {
		in[i] = true
	}
	for _, a := range side {
		r.links.sides[a] += d
		for b := range r.slots {
			if !in[b] {
				r.links.cut[pair(a, b)] += d
				r.apply(a, b)
			}
		}
	}
}

// doFlap takes one running member's links down and up as ev.Downs says.
func (r *runner) doFlap(ctx context.Context, ev soak.Event) {
	r.mu.Lock()
	i, ok := ev.Target(r.running())
	if !ok || r.links.down[i] {
		r.rep.Skipped[ev.Kind]++
		r.mu.Unlock()
		return
	}
	r.rep.Injected[ev.Kind]++
	start := r.now()
	r.note("flap: %s's links go down %d times in %v", r.slots[i].member(), len(ev.Downs), ev.Dur.Round(time.Second))
	r.mu.Unlock()
	for _, d := range ev.Downs {
		r.setDown(ctx, i, true, start+d.From)
		r.setDown(ctx, i, false, start+d.To)
	}
	r.mu.Lock()
	r.rep.Windows = append(r.rep.Windows, soak.Window{Interval: soak.Interval{From: start, To: r.now()}})
	r.mu.Unlock()
}

// setDown waits until at (not when ctx ends: a link is never left down),
// then sets slot i's links down or up.
func (r *runner) setDown(ctx context.Context, i int, down bool, at time.Duration) {
	if ctx.Err() == nil {
		r.sleepUntil(ctx, at)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.links.down[i] = down
	r.applySlot(i)
}

// doRateDrop cuts one running member's link rates to ev.Factor for ev.Dur.
func (r *runner) doRateDrop(ctx context.Context, ev soak.Event) {
	r.mu.Lock()
	i, ok := ev.Target(r.running())
	if _, dropped := r.links.rate[i]; !ok || dropped {
		r.rep.Skipped[ev.Kind]++
		r.mu.Unlock()
		return
	}
	r.rep.Injected[ev.Kind]++
	start := r.now()
	r.note("rate drop: %s's links at %.0f%% for %v", r.slots[i].member(), 100*ev.Factor, ev.Dur.Round(time.Second))
	r.setRate(i, ev.Factor)
	r.mu.Unlock()
	wait(ctx, ev.Dur)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setRate(i, 0)
	r.rep.Windows = append(r.rep.Windows, soak.Window{Interval: soak.Interval{From: start, To: r.now()}})
}

// setRate sets slot i's rate factor (0: back to normal). Lock held.
func (r *runner) setRate(i int, f float64) {
	if f == 0 {
		delete(r.links.rate, i)
	} else {
		r.links.rate[i] = f
	}
	r.applySlot(i)
}

// wait sleeps for d or until ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
