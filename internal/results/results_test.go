package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRowMarkdown(t *testing.T) {
	r := Row{Figure: "relay bytes per step", Target: "< 1 MiB", Measured: "10.1 KiB", Met: "yes",
		Command: "natlab -cases a|b", Commit: "abc1234", Machine: "x, 2 CPUs", Date: "2026-11-27 10:00", Page: "nat.md"}
	want := "| relay bytes per step | < 1 MiB | 10.1 KiB | yes | `natlab -cases a\\|b` | abc1234 | x, 2 CPUs, 2026-11-27 10:00 | nat.md |"
	if got := r.Markdown(); got != want {
		t.Errorf("Markdown\n%s\nwant\n%s", got, want)
	}
	if got := (Row{Command: "c"}).Markdown(); got != "| — | — | — | — | `c` | — | — | — |" {
		t.Errorf("empty row: %s", got)
	}
	if n := strings.Count(strings.Split(Header, "\n")[0], "|"); n != strings.Count(r.Markdown(), "|")-strings.Count(r.Markdown(), `\|`) {
		t.Errorf("header has %d separators, the row %d", n, strings.Count(r.Markdown(), "|"))
	}
}

func TestStamp(t *testing.T) {
	rows := []Row{{Figure: "a"}, {Figure: "b"}}
	Stamp(rows, []string{"natlab", "-repeat", "3"}, "", time.Date(2026, 11, 27, 10, 5, 0, 0, time.UTC))
	for _, r := range rows {
		if r.Command != "natlab -repeat 3" || r.Date != "2026-11-27 10:05" || r.Machine == "" || r.Commit != "" {
			t.Errorf("stamped %+v", r)
		}
	}
}

func TestCommitOfNonBinary(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(p, []byte("not a binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := Commit(p); c != "" {
		t.Errorf("Commit of a text file: %q", c)
	}
}

func TestCPUModel(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpuinfo")
	body := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)  Platinum 8481C CPU @ 2.70GHz\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := cpuModel(p); m != "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz" {
		t.Errorf("cpuModel = %q", m)
	}
	if m := cpuModel(filepath.Join(t.TempDir(), "none")); m != "" {
		t.Errorf("cpuModel of a missing file = %q", m)
	}
}
