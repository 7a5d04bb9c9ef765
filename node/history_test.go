package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	histLine1 = `{"step":0,"members":0,"eval_loss":5.5,"model_hash":"a"}`
	histLine2 = `{"step":1,"members":3,"eval_loss":2.5,"bytes_sent":42,"wall_sec":1.5,"model_hash":"b"}`
)

func TestDecodeHistory(t *testing.T) {
	long := `{"model_hash":"` + strings.Repeat("x", MaxHistoryLine) + `"}`
	cases := []struct {
		name    string
		in      string
		steps   []uint64 // the records' steps when it decodes
		badLine int      // the line an error names, 0 for none
	}{
		{"good", histLine1 + "\n" + histLine2 + "\n", []uint64{0, 1}, 0},
		{"blank lines and no final newline", "\n" + histLine1 + "\n  \n" + histLine2, []uint64{0, 1}, 0},
		{"unknown fields", `{"step":7,"new_field":[1,2]}` + "\n", []uint64{7}, 0},
		{"empty", "", nil, 0},
		{"truncated last line", histLine1 + "\n" + histLine2[:30], []uint64{0}, 0},
		{"truncated last line inside a string", histLine1 + "\n" + histLine2[:len(histLine2)-3], []uint64{0}, 0},
		{"corrupt middle line", histLine1 + "\nnot json\n" + histLine2 + "\n", nil, 2},
		{"truncated middle line", histLine1 + "\n" + histLine2[:30] + "\n" + histLine2 + "\n", nil, 2},
		{"garbage last line", histLine1 + "\n" + `{"step":1}x`, nil, 2},
		{"truncated last line with its newline", histLine1 + "\n" + histLine2[:30] + "\n", nil, 2},
		{"oversize line", histLine1 + "\n" + long + "\n", nil, 2},
		{"oversize last line", long, nil, 1},
		{"wrong type", `{"step":"one"}` + "\n", nil, 1},
		{"negative time", histLine1 + "\n" + `{"step":1,"allreduce_sec":-1}` + "\n", nil, 2},
		{"negative bytes", `{"step":1,"bytes_received":-5}` + "\n", nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := DecodeHistory(strings.NewReader(tc.in))
			if tc.badLine != 0 {
				want := fmt.Sprintf("line %d:", tc.badLine)
				if !errors.Is(err, ErrBadHistory) || !strings.Contains(err.Error(), want) {
					t.Fatalf("err = %v, want ErrBadHistory naming %q", err, want)
				}
				return
			}
			if err != nil || len(recs) != len(tc.steps) {
				t.Fatalf("got %+v, %v; want steps %v", recs, err, tc.steps)
			}
			for i, s := range tc.steps {
				if recs[i].Step != s {
					t.Errorf("record %d: step %d, want %d", i, recs[i].Step, s)
				}
			}
		})
	}
}

// A line of exactly MaxHistoryLine bytes is accepted; one byte more is not.
func TestDecodeHistoryLineLimit(t *testing.T) {
	pad := func(n int) string {
		head := `{"step":3,"model_hash":"`
		return head + strings.Repeat("x", n-len(head)-2) + `"}`
	}
	if recs, err := DecodeHistory(strings.NewReader(pad(MaxHistoryLine) + "\n")); err != nil || len(recs) != 1 || recs[0].Step != 3 {
		t.Fatalf("line of MaxHistoryLine bytes: %v", err)
	}
	if _, err := DecodeHistory(strings.NewReader(pad(MaxHistoryLine+1) + "\n")); !errors.Is(err, ErrBadHistory) {
		t.Fatalf("line of MaxHistoryLine+1 bytes: err %v, want ErrBadHistory", err)
	}
}

func TestReadHistory(t *testing.T) {
	home := t.TempDir()
	if _, err := ReadHistory(home); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err %v, want fs.ErrNotExist", err)
	}
	n := &Node{cfg: Config{Home: home}, log: slog.New(slog.DiscardHandler)}
	for _, r := range []OuterRecord{{Step: 0, EvalLoss: 5.5, ModelHash: "a"}, {Step: 1, Members: 3, EvalLoss: 2.5, BytesSent: 42, ModelHash: "b"}} {
		if err := n.appendHistory(r); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := ReadHistory(home)
	if err != nil || len(recs) != 2 || recs[1].Members != 3 || recs[1].BytesSent != 42 || recs[0].EvalLoss != 5.5 {
		t.Fatalf("got %+v, %v", recs, err)
	}
	path := filepath.Join(home, HistoryFile)
	os.WriteFile(path, []byte("{\"step\":1}\nnot json\n"), 0o600)
	_, err = ReadHistory(home)
	if !errors.Is(err, ErrBadHistory) || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("corrupt history: err = %v, want one naming %s and line 2", err, path)
	}
}

func FuzzDecodeHistory(f *testing.F) {
	f.Add(histLine1 + "\n" + histLine2 + "\n")
	f.Add(histLine1 + "\n" + histLine2[:20])
	f.Add("\n\n{}\n")
	f.Fuzz(func(t *testing.T, in string) {
		recs, err := DecodeHistory(strings.NewReader(in))
		if err != nil && !errors.Is(err, ErrBadHistory) {
			t.Fatalf("error %v does not wrap ErrBadHistory", err)
		}
		if err == nil && len(recs) > strings.Count(in, "\n")+1 {
			t.Fatalf("%d records from %d lines", len(recs), strings.Count(in, "\n")+1)
		}
		for _, r := range recs {
			if r.check() != nil {
				t.Fatalf("record %+v fails check", r)
			}
		}
	})
}

// TestAppendAfterCrash: a record cut short by a crash is dropped when the
// restarted node appends, so the file reads back whole (and a good file is
// only appended to).
func TestAppendAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), HistoryFile)
	line := func(step uint64) []byte {
		b, _ := json.Marshal(OuterRecord{Step: step, EvalLoss: 1})
		return append(b, '\n')
	}
	if err := appendRecordLine(path, line(1)); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(line(2)[:9]) // the crash
	f.Close()
	if err := appendRecordLine(path, line(3)); err != nil {
		t.Fatal(err)
	}
	f, _ = os.Open(path)
	defer f.Close()
	recs, err := DecodeHistory(f)
	if err != nil || len(recs) != 2 || recs[0].Step != 1 || recs[1].Step != 3 {
		t.Fatalf("after a crash and an append: %+v, %v", recs, err)
	}
}
