package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/internal/soak"
)

// testRunner is a runner over n slots and no network, for the harness's
// bookkeeping.
func testRunner(t *testing.T, n int) *runner {
	r := &runner{rep: &soak.Report{}, links: newLinkState()}
	for i := range n {
		r.slots = append(r.slots, &slot{i: i, host: "h" + string(rune('a'+i)), gen: 1, home: t.TempDir(), resume: -1})
	}
	return r
}

// TestResumeSettlesItsOwnKill: a kill of b, then of a, then b's restart
// and first status (at step 0: it had no checkpoint), then a's: each
// first status settles its own kill's entry. The entry once taken at
// restart time (the newest) was a's for b, which failed a as "first
// status at outer step 0, below its newest checkpoint's 20".
func TestResumeSettlesItsOwnKill(t *testing.T) {
	r := testRunner(t, 2)
	a, b := r.slots[0], r.slots[1]
	ib := r.noteKill(b)
	ia := r.noteKill(a)
	r.rep.Resumes[ia].Checkpoint, r.rep.Resumes[ia].HasCheckpoint = 20, true
	r.awaitResume(b, ib)
	b.status.OuterStep = 0
	r.settleResume(b)
	r.awaitResume(a, ia)
	a.status.OuterStep = 20
	r.settleResume(a)
	for _, rs := range r.rep.Resumes {
		if rs.Err != "" {
			t.Errorf("%s: %s", rs.Member, rs.Err)
		}
	}
	if got := r.rep.Resumes[ia]; got.Member != a.member() || got.FirstStep != 20 {
		t.Errorf("a's entry: %+v", got)
	}
}

// TestResumeDroppedWhenStoppedFirst: a member restarted from its step-160
// checkpoint leaves (the harness stops it) before it served a status; the
// fresh member started next on its slot, at step 0, does not settle that
// resume: it is counted as stopped before its first status, not as a
// restart that lost its checkpoint (60 minutes, seed 1, 1d761cf: nyc.12).
func TestResumeDroppedWhenStoppedFirst(t *testing.T) {
	r := testRunner(t, 1)
	s := r.slots[0]
	i := r.noteKill(s)
	r.rep.Resumes[i].Checkpoint, r.rep.Resumes[i].HasCheckpoint = 160, true
	r.awaitResume(s, i)
	r.free(s) // stopped by a leave before any status read
	s.status.OuterStep = 0
	r.settleResume(s) // the slot's next member's first status
	if got := r.rep.Resumes[i]; got.Err != "" || !got.Unchecked {
		t.Fatalf("resume entry %+v, want unchecked and no error", got)
	}
	if v := r.rep.Verdict(); len(v) != 0 {
		t.Fatalf("verdict %q", v)
	}
}

// TestUnexpectedExitClosesLog: a member that exits unasked leaves its
// slot empty with its log closed, so that the slot's next member gets a
// log of its own instead of appending to (and being reported with) the
// one that exited.
func TestUnexpectedExitClosesLog(t *testing.T) {
	r := testRunner(t, 1)
	s := r.slots[0]
	f, err := os.Create(filepath.Join(t.TempDir(), s.member()+".log"))
	if err != nil {
		t.Fatal(err)
	}
	s.log, s.state = f, up
	r.exitedOnItsOwn(s, errors.New("exit status 1"))
	if s.log != nil || s.state != empty {
		t.Fatalf("slot after the exit: log %v, state %v", s.log, s.state)
	}
	if len(r.rep.Failures) != 1 || !strings.Contains(r.rep.Failures[0], f.Name()) {
		t.Fatalf("failures %q do not name %s", r.rep.Failures, f.Name())
	}
	if err := f.Close(); err == nil {
		t.Error("the exited member's log is still open")
	}
}

// TestBootstrapSkipsCutOffMembers: a joiner is given bootstrap peers that
// a partition or a flap does not cut off from it, while there are any.
func TestBootstrapSkipsCutOffMembers(t *testing.T) {
	r := testRunner(t, 6)
	for _, s := range r.slots[:5] {
		s.state, s.id = up, "id-"+s.host
	}
	r.slots[3].id = "" // not seen yet
	joiner := r.slots[5]
	for _, i := range []int{0, 1} {
		r.links.cut[pair(joiner.i, i)]++
	}
	r.links.down[2] = true
	if got := r.bootstrapSlots(joiner); !slices.Equal(got, []int{4}) {
		t.Errorf("bootstrap slots %v, want [4]", got)
	}
	r.links.cut[pair(joiner.i, 4)]++
	if got := r.bootstrapSlots(joiner); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("with every member cut off: %v, want the first three, [0 1 2]", got)
	}
}

// TestKilledByInterrupt: a process that SIGINT's default action ended is
// told apart from one that exited with a status, or by another signal.
func TestKilledByInterrupt(t *testing.T) {
	run := func(script string) error { return exec.Command("sh", "-c", script).Run() }
	if err := run("kill -INT $$"); !killedByInterrupt(err) {
		t.Fatalf("SIGINT: %v not seen as one", err)
	}
	for _, script := range []string{"exit 1", "kill -TERM $$", "true"} {
		if err := run(script); killedByInterrupt(err) {
			t.Fatalf("%q: %v seen as SIGINT", script, err)
		}
	}
}

// TestLongLivedRunPlainBuild: the long-lived members start the plain
// build, every other member the race-built one; without a plain build all
// run -bin.
func TestLongLivedRunPlainBuild(t *testing.T) {
	r := testRunner(t, 3)
	r.c.Bin, r.c.LongLivedBin = "/bin/race", "/bin/plain"
	r.slots[0].longLived = true
	if got := []string{r.binOf(r.slots[0]), r.binOf(r.slots[1])}; !slices.Equal(got, []string{"/bin/plain", "/bin/race"}) {
		t.Fatalf("binaries %v, want the plain build for the long-lived member only", got)
	}
	r.c.LongLivedBin = ""
	if got := r.binOf(r.slots[0]); got != "/bin/race" {
		t.Fatalf("without a plain build the long-lived member runs %s", got)
	}
}
