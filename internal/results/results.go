// Package results formats measured figures as rows of docs/results.md, so
// that a harness which measures a figure prints the row that records it:
// the figure, its target, what was measured, whether the target is met, the
// command, the commit of the binary measured, the machine and the date.
package results

import (
	"bufio"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// Row is one row of docs/results.md. Empty fields print as "—".
type Row struct {
	Figure, Target, Measured string
	Met                      string // "yes", "no", or a qualified answer
	Command                  string
	Commit                   string // the measured binary's VCS commit (Commit), short
	Machine                  string // Machine()
	Date                     string // UTC, "2006-01-02 15:04"
	Page                     string // the docs page that says how the part works
}

// Header is the table header and separator of docs/results.md, each
// ending in a newline.
const Header = "| figure | target | measured | met | command | commit | machine, date (UTC) | page |\n" +
	"|---|---|---|---|---|---|---|---|\n"

// Markdown returns the row as one line of the table, without a newline.
// A "|" inside a field is escaped.
func (r Row) Markdown() string {
	cell := func(s string) string {
		if s == "" {
			return "—"
		}
		return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", `\|`)
	}
	machine := strings.TrimSuffix(cell(r.Machine)+", "+cell(r.Date), ", —")
	return "| " + strings.Join([]string{cell(r.Figure), cell(r.Target), cell(r.Measured), cell(r.Met),
		"`" + strings.ReplaceAll(r.Command, "|", `\|`) + "`", cell(r.Commit), machine, cell(r.Page)}, " | ") + " |"
}

// Write prints rows under Header to w, after a line saying what they are.
func Write(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("\ndocs/results.md rows:\n\n" + Header)
	for _, r := range rows {
		b.WriteString(r.Markdown() + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Stamp fills the command (args joined by spaces), the commit of the binary
// at bin (empty bin or no VCS stamp: left empty), the machine and the date
// of every row.
func Stamp(rows []Row, args []string, bin string, now time.Time) {
	commit := Commit(bin)
	machine := Machine()
	for i := range rows {
		rows[i].Command = strings.Join(args, " ")
		rows[i].Commit, rows[i].Machine = commit, machine
		rows[i].Date = now.UTC().Format("2006-01-02 15:04")
	}
}

// Commit returns the first 7 digits of the VCS commit recorded in the Go
// binary at path, with "+modified" when its tree had uncommitted changes;
// "" when the binary records none.
func Commit(path string) string {
	if path == "" {
		return ""
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return ""
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if rev != "" && modified == "true" {
		rev += "+modified"
	}
	return rev
}

// Machine describes this machine: the CPU model (from /proc/cpuinfo where
// there is one) and the number of CPUs the process may use.
func Machine() string {
	model := cpuModel("/proc/cpuinfo")
	if model == "" {
		model = runtime.GOARCH
	}
	return fmt.Sprintf("%s, %d CPUs", model, runtime.NumCPU())
}

// cpuModel returns the first "model name" of a /proc/cpuinfo file, or "".
func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}
