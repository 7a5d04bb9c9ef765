package soak

import (
	"bufio"
	"io"
	"regexp"
	"strings"
)

// Finding is one line of a member's log that the soak counts against it.
type Finding struct {
	// What: "panic", "race", "fatal" or "error" (a level=ERROR line).
	What string
	// Line is the whole line; Number counts from 1.
	Line   string
	Number int
}

// Expected says which level=ERROR lines a fault explains: a line
// containing Contains in the log of Member.
type Expected struct {
	Member, Contains, Why string
}

// maxLine bounds one log line read; longer lines are read in pieces.
const maxLine = 1 << 20

var errorLine = regexp.MustCompile(`(^|\s)level=ERROR(\s|$)`)

// ScanLog returns the lines of a node's log that a soak fails on: Go
// panics ("panic:" at the start of a line, or "fatal error:"), the race
// detector's reports ("WARNING: DATA RACE") and slog lines at level ERROR.
func ScanLog(r io.Reader) ([]Finding, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var out []Finding
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		what := ""
		switch {
		case strings.HasPrefix(line, "panic:"):
			what = "panic"
		case strings.HasPrefix(line, "fatal error:"):
			what = "fatal"
		case strings.Contains(line, "WARNING: DATA RACE"):
			what = "race"
		case errorLine.MatchString(line):
			what = "error"
		default:
			continue
		}
		out = append(out, Finding{What: what, Line: line, Number: n})
	}
	return out, sc.Err()
}

// Short is the line cut at 300 bytes, for reports.
func (f Finding) Short() string {
	if len(f.Line) > 300 {
		return f.Line[:300] + "…"
	}
	return f.Line
}

// Explained returns the expectation that explains an error finding of
// member, if any. Panics, races and fatal errors are never explained.
func Explained(f Finding, member string, exp []Expected) (Expected, bool) {
	if f.What != "error" {
		return Expected{}, false
	}
	for _, e := range exp {
		if e.Member == member && strings.Contains(f.Line, e.Contains) {
			return e, true
		}
	}
	return Expected{}, false
}
