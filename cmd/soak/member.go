package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/internal/soak"
	"github.com/intellect-node/intellect-node/internal/wan"
	"github.com/intellect-node/intellect-node/node"
)

// Inside every slot's namespace.
const (
	statusAddr = "127.0.0.1:8080"
	nodePort   = 4001
	// diskSlot is the initial member whose home is a small tmpfs (DiskFull).
	diskSlot = 2
	// diskSize is that tmpfs's size: room for a few checkpoints.
	diskSize = 256 << 20
	// leaveTimeout bounds a graceful leave (SIGINT to exit).
	leaveTimeout = 60 * time.Second
)

// slotState is what a slot holds.
type slotState int

const (
	empty   slotState = iota // no member
	up                       // a member's process runs
	down                     // killed; its restart with the same home is due
	leaving                  // SIGINT sent
)

// slot is one namespace and the member it holds.
type slot struct {
	i         int
	host      string
	gen       int    // homes made so far on this slot; the member is host.gen
	home      string // the member's home ("" when empty)
	tmpfs     bool   // home is a tmpfs mount
	skew      time.Duration
	state     slotState
	proc      *wan.Proc
	hc        *http.Client
	id        string // peer id, from its status
	busy      bool   // a scenario holds it: churn leaves it alone
	longLived bool
	log       *os.File
	// expectExit: the harness killed or stopped it; any other exit fails.
	expectExit bool
	// resume is the index in the report's Resumes awaiting its first status
	// after a restart (-1: none).
	resume int
	status node.Status // last read
	peers  []node.PeerStatus
}

// member is the slot's current member's name, e.g. "chi2.3".
func (s *slot) member() string { return fmt.Sprintf("%s.%d", s.host, s.gen) }

// runner is one soak: the network, the slots and what was observed.
type runner struct {
	c     config
	net   *wan.Net
	t0    time.Time
	mu    sync.Mutex
	slots []*slot
	links linkState
	rep   *soak.Report
	exp   []soak.Expected
	// events joins the fault goroutines; procs the exit watchers.
	events, procs sync.WaitGroup
	closed        bool
}

func newRunner(c config, n *wan.Net) *runner {
	r := &runner{c: c, net: n, t0: time.Now(), links: newLinkState(), rep: &soak.Report{
		Seed: c.Seed, HealWindow: c.HealWindow, Injected: map[soak.Kind]int{}, Skipped: map[soak.Kind]int{},
		Usage: map[string]map[string][]soak.Point{}, Explained: map[string]int{},
		Setup: fmt.Sprintf("%d slots on %s widened, %d–%d members (%d long-lived); intellect-node start --device sim --sim-step %v, shipped defaults otherwise (tiny, %s, H = %d), %s; links ×%.3f of paper rate",
			c.Slots, c.Profile, c.Initial, c.Max, c.LongLived, c.SimStep, node.DefaultCodec, node.CodecPoint(node.DefaultCodec).InnerSteps, builds(c), c.rateScale)}}
	for i, h := range n.Hosts {
		r.slots = append(r.slots, &slot{i: i, host: h.Name, longLived: i < c.LongLived, resume: -1,
			hc: n.HTTPClient(i)})
		r.slots[i].hc.Timeout = 3 * time.Second
	}
	return r
}

// now is the run's clock.
func (r *runner) now() time.Duration { return time.Since(r.t0) }

// fail records a failure of the run (under the lock or not: it locks
// nothing else).
func (r *runner) fail(format string, a ...any) {
	msg := fmt.Sprintf("t=%v ", r.now().Round(time.Second)) + fmt.Sprintf(format, a...)
	fmt.Println("soak: FAIL:", msg)
	r.rep.Failures = append(r.rep.Failures, msg)
}

// note records a line of the report and prints it.
func (r *runner) note(format string, a ...any) {
	msg := fmt.Sprintf("t=%v ", r.now().Round(time.Second)) + fmt.Sprintf(format, a...)
	fmt.Println("soak:", msg)
	r.rep.Notes = append(r.rep.Notes, msg)
}

// startFresh gives slot i a new member with a fresh home (a tmpfs of
// diskSize if tmpfs) and starts it. Called with the lock held.
func (r *runner) startFresh(i int, skew time.Duration, tmpfs bool) error {
	s := r.slots[i]
	s.gen++
	s.home, s.skew, s.tmpfs, s.id = filepath.Join(r.c.Dir, "homes", s.member()), skew, tmpfs, ""
	if tmpfs {
		if err := soak.MountTmpfs(s.home, diskSize); err != nil {
			return err
		}
	} else if err := os.MkdirAll(s.home, 0o700); err != nil {
		return err
	}
	return r.startProc(s)
}

// startProc starts slot s's member on its home, bootstrapping from the
// running members (none for the creator). Called with the lock held.
func (r *runner) startProc(s *slot) error {
	if r.closed {
		return wan.ErrClosed
	}
	if s.log == nil {
		f, err := os.OpenFile(filepath.Join(r.c.Dir, "logs", s.member()+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		s.log = f
	}
	args := []string{r.binOf(s), "start", "--device", "sim", "--sim-step", r.c.SimStep.String(),
		"--status", statusAddr, "--home", s.home}
	if s.tmpfs {
		args = append(args, "--checkpoint-every", fmt.Sprint(diskCheckpointEvery))
	}
	args = append(append(args, r.c.NodeFlags...), r.bootstrap(s)...)
	cmd := r.net.Command(s.i, args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if s.skew != 0 {
		cmd.Env = append(cmd.Env, soak.SkewEnv+"="+s.skew.String())
	}
	p, err := r.net.StartCommand(s.i, cmd)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.log, "soak: t=%v started %s\n", r.now().Round(time.Millisecond), strings.Join(args[1:], " "))
	s.proc, s.state, s.expectExit, s.status = p, up, false, node.Status{}
	r.procs.Go(func() { r.watchExit(s, p) })
	return nil
}

// builds says which binaries the members run, for the report.
func builds(c config) string {
	if c.LongLivedBin != "" && c.LongLivedBin != c.Bin {
		return filepath.Base(c.Bin) + " (make soak: -race), the long-lived " + filepath.Base(c.LongLivedBin) + " (plain)"
	}
	return filepath.Base(c.Bin) + " (make soak: -race)"
}

// binOf is the binary slot s's member runs: the long-lived members, whose
// resources are judged, run a plain build, the others the race-built one
// (the race runtime's own memory grows in a long-running program:
// golang/go#26813, #37233).
func (r *runner) binOf(s *slot) string {
	if s.longLived && r.c.LongLivedBin != "" {
		return r.c.LongLivedBin
	}
	return r.c.Bin
}

// bootstrap is --bootstrap for up to 3 running members with known ids,
// the long-lived first; none for the creator's first start.
func (r *runner) bootstrap(self *slot) []string {
	var out []string
	for _, i := range r.bootstrapSlots(self) {
		out = append(out, "--bootstrap", fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", r.net.Hosts[i].Addr, nodePort, r.slots[i].id))
	}
	return out
}

// maxBootstrap is how many bootstrap peers a member is given.
const maxBootstrap = 3

// bootstrapSlots picks the slots of up to maxBootstrap running members
// with known ids, the long-lived first, leaving out those that a
// partition or a flap cuts off from self: a joiner given only peers it
// cannot reach gets no run manifest and exits. With none reachable it
// picks from all (a restarted member starts alone and redials them).
// Lock held.
func (r *runner) bootstrapSlots(self *slot) []int {
	var reach, all []int
	for _, s := range r.slots {
		if s == self || s.state != up || s.id == "" {
			continue
		}
		all = append(all, s.i)
		if r.links.cut[pair(self.i, s.i)] == 0 && !r.links.down[s.i] {
			reach = append(reach, s.i)
		}
	}
	if len(reach) == 0 {
		reach = all
	}
	return reach[:min(len(reach), maxBootstrap)]
}

// watchExit records an exit that the harness did not cause as a failure.
func (r *runner) watchExit(s *slot, p *wan.Proc) {
	err := p.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.proc != p || s.expectExit || r.closed {
		return
	}
	r.exitedOnItsOwn(s, err)
}

// exitedOnItsOwn fails the run for slot s's member, which exited with err
// unasked, and empties the slot. Its home stays as evidence; its log is
// closed, so that the slot's next member writes (and is reported with) a
// log of its own. Lock held.
func (r *runner) exitedOnItsOwn(s *slot, err error) {
	r.fail("%s exited on its own: %v (log %s)", s.member(), err, s.log.Name())
	if s.resume >= 0 {
		r.rep.Resumes[s.resume].Err = fmt.Sprintf("exited before serving its status: %v", err)
		s.resume = -1
	}
	s.log.Close()
	s.state, s.log, s.proc, s.id = empty, nil, nil, ""
}

// dropResume marks the resume slot s's member has yet to show as
// unchecked: the harness stops or kills it before its first status. Left
// pending, the slot's next member — a fresh joiner at step 0 — settled it,
// a restart read at step 0 although it resumed from its checkpoint. Lock
// held.
func (r *runner) dropResume(s *slot) {
	if s.resume >= 0 {
		r.rep.Resumes[s.resume].Unchecked = true
		s.resume = -1
	}
}

// kill sends SIGKILL to slot s's member and waits for it to exit. Called
// with the lock held; it is released while waiting.
func (r *runner) kill(s *slot) {
	r.dropResume(s)
	s.expectExit, s.state = true, down
	p := s.proc
	syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	r.mu.Unlock()
	<-p.Done()
	r.mu.Lock()
}

// stop sends SIGINT to slot s's member and waits up to leaveTimeout for a
// clean exit; a hang or an exit status other than 0 is a failure. Called
// with the lock held; it is released while waiting.
func (r *runner) stop(s *slot) {
	s.expectExit, s.state = true, leaving
	p := s.proc
	syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGINT)
	r.mu.Unlock()
	var err error
	select {
	case <-p.Done():
		err = p.Wait()
	case <-time.After(leaveTimeout):
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.Done()
		err = fmt.Errorf("still running %v after SIGINT", leaveTimeout)
	}
	r.mu.Lock()
	switch {
	case err != nil && s.status.PeerID == "" && killedByInterrupt(err):
		r.note("%s stopped before it served a status: SIGINT came before its handler (%v)", s.member(), err)
	case err != nil:
		r.fail("%s: graceful leave: %v (log %s)", s.member(), err, s.log.Name())
	}
}

// killedByInterrupt reports whether err is the exit of a process that
// SIGINT's default action ended: a member the harness stopped within
// milliseconds of its start, before its runtime installed the handler
// (60 minutes, seed 2: a leave 40 ms after a restart). What a node does
// once it serves its status is a leave like any other.
func killedByInterrupt(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGINT
}

// free removes slot s's stopped member: its home (and mount) goes, its log
// stays. Called with the lock held.
func (r *runner) free(s *slot) {
	r.dropResume(s)
	if s.tmpfs {
		if err := soak.Unmount(s.home); err != nil {
			r.note("%v", err)
		}
	}
	if err := os.RemoveAll(s.home); err != nil {
		r.note("remove %s: %v", s.home, err)
	}
	if s.log != nil {
		s.log.Close()
	}
	s.state, s.home, s.tmpfs, s.skew, s.log, s.id, s.proc, s.busy = empty, "", false, 0, nil, "", nil, false
}

// stopAll makes every member leave gracefully at the end of the run and
// checks that each left a checkpoint it could resume from.
func (r *runner) stopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range r.slots {
		if s.state != up {
			continue
		}
		s.expectExit, s.state = true, leaving
		syscall.Kill(-s.proc.Cmd.Process.Pid, syscall.SIGINT)
		p := s.proc
		wg.Go(func() { r.waitLeave(s, p) })
	}
	r.mu.Unlock()
	wg.Wait()
	r.mu.Lock()
	for _, s := range r.slots {
		if s.state == leaving {
			if _, _, err := newestCheckpoint(s.home); err != nil {
				r.fail("%s: the checkpoint written at exit does not load: %v", s.member(), err)
			}
		}
	}
}

// waitLeave waits for a member told to leave at the end.
func (r *runner) waitLeave(s *slot, p *wan.Proc) {
	select {
	case <-p.Done():
		if err := p.Wait(); err != nil {
			r.mu.Lock()
			r.fail("%s: exit at the end: %v", s.member(), err)
			r.mu.Unlock()
		}
	case <-time.After(leaveTimeout):
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		r.mu.Lock()
		r.fail("%s: still running %v after SIGINT at the end", s.member(), leaveTimeout)
		r.mu.Unlock()
	}
}

// close stops whatever still runs, deletes the namespaces and unmounts the
// tmpfs homes. Idempotent.
func (r *runner) close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	if err := r.net.Close(); err != nil {
		fmt.Println("soak: close network:", err)
	}
	r.procs.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.slots {
		if s.tmpfs {
			if err := soak.Unmount(s.home); err != nil {
				fmt.Println("soak:", err)
			}
			s.tmpfs = false
		}
		if s.log != nil {
			s.log.Close()
			s.log = nil
		}
	}
}
