package main

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

// runBin runs the built binary with args and returns its standard output,
// standard error and exit status.
func runBin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(binPath, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// Every command's -h and --help prints its usage to standard output and
// exits 0, with nothing on standard error.
func TestCommandHelp(t *testing.T) {
	for name := range commands {
		for _, h := range []string{"-h", "--help"} {
			out, errs, code := runBin(t, name, h)
			if code != 0 || errs != "" || !strings.HasPrefix(out, "usage: intellect-node "+name+" ") {
				t.Errorf("%s %s: exit %d, stdout %.80q, stderr %q", name, h, code, out, errs)
			}
		}
	}
	out, errs, code := runBin(t, "help", "start")
	if code != 0 || errs != "" || !strings.Contains(out, "-inner-steps") {
		t.Errorf("help start: exit %d, stdout %.80q, stderr %q", code, out, errs)
	}
}

// The top-level -h, --help and help list every command on standard output
// and exit 0; no command or an unknown one is a usage error (exit 2, usage on
// standard error); a bad flag fails the command (exit 1, standard error).
func TestTopLevelUsage(t *testing.T) {
	for _, h := range []string{"-h", "--help", "help"} {
		out, errs, code := runBin(t, h)
		if code != 0 || errs != "" {
			t.Errorf("%s: exit %d, stderr %q", h, code, errs)
		}
		for name := range commands {
			if !strings.Contains(out, "\n  "+name+" ") {
				t.Errorf("%s: usage lacks %s", h, name)
			}
		}
	}
	for _, args := range [][]string{nil, {"no-such-command"}} {
		out, errs, code := runBin(t, args...)
		if code != 2 || out != "" || !strings.Contains(errs, "usage: intellect-node <command>") {
			t.Errorf("%q: exit %d, stdout %q, stderr %.80q", args, code, out, errs)
		}
	}
	out, errs, code := runBin(t, "status", "--no-such-flag")
	if code != 1 || out != "" || !strings.Contains(errs, "no-such-flag") {
		t.Errorf("status --no-such-flag: exit %d, stdout %q, stderr %.80q", code, out, errs)
	}
}

// `version` and `--version` print the binary's own build information.
func TestVersion(t *testing.T) {
	bi, err := buildinfo.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	want := versionLine(bi) + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		out, errs, code := runBin(t, args...)
		if code != 0 || errs != "" || out != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", args, code, out, errs, want)
		}
	}
}

func TestVersionLine(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamped := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261127100000-0123456789ab"},
			Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
				{Key: "vcs.time", Value: "2026-11-27T10:00:00Z"}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, c := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{stamped("false"), "intellect-node v0.0.0-20261127100000-0123456789ab commit " + rev + " 2026-11-27T10:00:00Z go1.26.0"},
		{stamped("true"), "intellect-node v0.0.0-20261127100000-0123456789ab commit " + rev + " (modified) 2026-11-27T10:00:00Z go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "intellect-node (devel) commit unknown go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0"}, "intellect-node (devel) commit unknown go1.26.0"},
		{nil, "intellect-node (devel) commit unknown (no build information)"},
	} {
		if got := versionLine(c.bi); got != c.want {
			t.Errorf("versionLine =\n%s\nwant\n%s", got, c.want)
		}
	}
}
