package node

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBoardSnapshotIsACopy pins that a snapshot shares nothing the board
// changes later: slices and the download are copied.
func TestBoardSnapshotIsACopy(t *testing.T) {
	var b board
	b.update(func(s *Status) {
		s.Addrs, s.Members = []string{"/ip4/1"}, []string{"a", "b"}
		s.Download = &Download{Step: 3, BytesDone: 10, BytesTotal: 100}
	})
	s := b.snapshot()
	s.Addrs[0], s.Members[1], s.Download.BytesDone = "x", "x", 99
	again := b.snapshot()
	if again.Addrs[0] != "/ip4/1" || again.Members[1] != "b" || again.Download.BytesDone != 10 {
		t.Fatalf("a snapshot's change reached the board: %+v", again)
	}
	b.update(func(s *Status) { s.Members[0] = "c" })
	if s.Members[0] != "a" {
		t.Fatal("a board change reached an earlier snapshot")
	}
}

// TestBoardSnapshotEmptyListsAndUptime pins that lists are [] not null in
// JSON, and uptime counts from StartedAt (0 before the start).
func TestBoardSnapshotEmptyListsAndUptime(t *testing.T) {
	var b board
	s := b.snapshot()
	if s.UptimeSec != 0 || s.Download != nil {
		t.Fatalf("unstarted: uptime %v download %v", s.UptimeSec, s.Download)
	}
	raw, _ := json.Marshal(s)
	for _, f := range []string{`"addrs":[]`, `"members":[]`} {
		if !strings.Contains(string(raw), f) {
			t.Errorf("status JSON lacks %s: %s", f, raw)
		}
	}
	if strings.Contains(string(raw), "download") || strings.Contains(string(raw), "tokens_by_source") {
		t.Errorf("empty optional fields serialised: %s", raw)
	}
	b.update(func(s *Status) { s.StartedAt = time.Now().Add(-time.Minute) })
	if up := b.snapshot().UptimeSec; up < 59 || up > 120 {
		t.Fatalf("uptime %v, want ≈ 60 s", up)
	}
}

// TestBoardPeers pins setPeers/peerList: a copy, never nil.
func TestBoardPeers(t *testing.T) {
	var b board
	if ps := b.peerList(); ps == nil || len(ps) != 0 {
		t.Fatalf("empty peer list %v", ps)
	}
	b.setPeers([]PeerStatus{{ID: "a"}, {ID: "b"}})
	ps := b.peerList()
	ps[0].ID = "x"
	if got := b.peerList(); len(got) != 2 || got[0].ID != "a" {
		t.Fatalf("peers %+v", got)
	}
	b.setPeers(nil)
	if ps := b.peerList(); ps == nil || len(ps) != 0 {
		t.Fatalf("peer list after clearing %v", ps)
	}
}

// TestBoardHistoryBounded pins record/historyList: in order, a copy, never
// nil, and only the newest maxHistory records kept.
func TestBoardHistoryBounded(t *testing.T) {
	var b board
	if h := b.historyList(); h == nil || len(h) != 0 {
		t.Fatalf("empty history %v", h)
	}
	for i := range maxHistory + 25 {
		b.record(OuterRecord{Step: uint64(i)})
	}
	h := b.historyList()
	if len(h) != maxHistory || h[0].Step != 25 || h[len(h)-1].Step != maxHistory+24 {
		t.Fatalf("history of %d from %d to %d", len(h), h[0].Step, h[len(h)-1].Step)
	}
	for i := 1; i < len(h); i++ {
		if h[i].Step != h[i-1].Step+1 {
			t.Fatalf("history out of order at %d", i)
		}
	}
	h[0].Step = 999999
	if b.historyList()[0].Step != 25 {
		t.Fatal("historyList shares the board's records")
	}
}

// TestBoardConcurrent pins that the board may be written by the training
// and mesh goroutines while handlers read it (run with -race).
func TestBoardConcurrent(t *testing.T) {
	var b board
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 300 {
			b.update(func(s *Status) { s.OuterStep = uint64(i); s.Members = append(s.Members, "m") })
			b.record(OuterRecord{Step: uint64(i)})
		}
	})
	wg.Go(func() {
		for range 300 {
			b.setPeers([]PeerStatus{{ID: "p"}})
		}
	})
	for range 300 {
		s := b.snapshot()
		if len(s.Members) > 0 && s.Members[0] != "m" {
			t.Fatal("torn members")
		}
		b.peerList()
		b.historyList()
	}
	wg.Wait()
	if s := b.snapshot(); s.OuterStep != 299 || len(b.historyList()) != 300 {
		t.Fatalf("final step %d, %d records", s.OuterStep, len(b.historyList()))
	}
}

// TestHistoryFileTable pins ReadHistory: records in order, blank lines
// skipped, a bad line an error naming the file and its line, and a missing
// file an fs.ErrNotExist.
func TestHistoryFileTable(t *testing.T) {
	cases := []struct {
		name    string
		content string
		steps   []uint64
		errLine string // "" no error
	}{
		{"one record", `{"step":0}` + "\n", []uint64{0}, ""},
		{"no final newline", `{"step":0}` + "\n" + `{"step":1}`, []uint64{0, 1}, ""},
		{"blank lines", "\n" + `{"step":2}` + "\n\n" + `{"step":3}` + "\n\n", []uint64{2, 3}, ""},
		{"empty file", "", nil, ""},
		{"bad first line", "garbage\n" + `{"step":1}` + "\n", nil, "line 1"},
		{"bad third line", `{"step":1}` + "\n" + `{"step":2}` + "\n" + `{"step":` + "\n", nil, "line 3"},
		{"wrong type", `{"step":"one"}` + "\n", nil, "line 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			if err := os.WriteFile(filepath.Join(home, HistoryFile), []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			recs, err := ReadHistory(home)
			if c.errLine != "" {
				if err == nil || !strings.Contains(err.Error(), c.errLine) || !strings.Contains(err.Error(), HistoryFile) {
					t.Fatalf("err %v, want one naming %s %s", err, HistoryFile, c.errLine)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var steps []uint64
			for _, r := range recs {
				steps = append(steps, r.Step)
			}
			if len(steps) != len(c.steps) {
				t.Fatalf("steps %v, want %v", steps, c.steps)
			}
			for i := range steps {
				if steps[i] != c.steps[i] {
					t.Fatalf("steps %v, want %v", steps, c.steps)
				}
			}
		})
	}
	if _, err := ReadHistory(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing history: %v, want ErrNotExist", err)
	}
}

// TestAppendHistoryRoundTrip pins that every field of a record written by
// appendHistory is read back, one line per record.
func TestAppendHistoryRoundTrip(t *testing.T) {
	home := t.TempDir()
	n := &Node{cfg: Config{Home: home}, log: unitLog}
	recs := []OuterRecord{
		{Step: 0, Time: time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC), EvalLoss: 5.5, ModelHash: "h0"},
		{Step: 1, Time: time.Date(2025, 5, 1, 12, 0, 3, 0, time.UTC), Members: 3, Loss: 4.25, EvalLoss: 4.5,
			AllReduceSec: 0.5, ComputeSec: 2, WallSec: 2.75, Utilization: 0.73, BytesSent: 1 << 20,
			BytesReceived: 1<<20 + 7, ModelHash: "h1", Attempts: 2},
	}
	for _, r := range recs {
		if err := n.appendHistory(r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadHistory(home)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d records, want %d", len(got), len(recs))
	}
	for i := range recs {
		if !got[i].Time.Equal(recs[i].Time) {
			t.Fatalf("record %d time %v, want %v", i, got[i].Time, recs[i].Time)
		}
		got[i].Time = recs[i].Time
		if got[i] != recs[i] {
			t.Fatalf("record %d = %+v, want %+v", i, got[i], recs[i])
		}
	}
	raw, _ := os.ReadFile(filepath.Join(home, HistoryFile))
	if lines := strings.Count(string(raw), "\n"); lines != len(recs) {
		t.Fatalf("%d lines for %d records", lines, len(recs))
	}
}

// TestAppendHistoryUnwritable pins that a history that cannot be written is
// an error, which keepHistory only logs: never fatal to the node.
func TestAppendHistoryUnwritable(t *testing.T) {
	n := &Node{cfg: Config{Home: filepath.Join(t.TempDir(), "missing", "dir")}, log: slog.New(slog.DiscardHandler)}
	if err := n.appendHistory(OuterRecord{Step: 1}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("history in a missing directory: %v", err)
	}
	n.keepHistory(OuterRecord{Step: 1})
}
