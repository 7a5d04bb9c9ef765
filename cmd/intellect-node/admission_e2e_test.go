package main

// End-to-end tests of admission with the commands a user
// types: a psk run and an allowlist run, each a creator and a member.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/node"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// runCommand runs a one-shot subcommand and returns its standard output.
func runCommand(t *testing.T, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(binPath, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("intellect-node %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// waitDone waits for the nodes to exit 0 and checks that they ended with
// one ring of both at every step, with the same models.
func waitDone(t *testing.T, steps uint64, a, b *proc) {
	t.Helper()
	for _, p := range []*proc{a, b} {
		select {
		case <-p.done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s did not finish %d outer steps\n%s", p.name, steps, p.logText())
		}
		if p.err != nil {
			t.Fatalf("%s exited with %v\n%s", p.name, p.err, p.logText())
		}
	}
	ha, hb := byStep(readHistoryFile(t, a)), byStep(readHistoryFile(t, b))
	for s := uint64(1); s <= steps; s++ {
		if ha[s].ModelHash == "" || ha[s].ModelHash != hb[s].ModelHash || ha[s].Members != 2 {
			t.Errorf("step %d: a %+v, b %+v: want one ring of 2, same hash", s, ha[s], hb[s])
		}
	}
}

// TestAdmissionCommands: a psk run (the creator writes the key to its home,
// the member is given it) and an allowlist run (the member prints its id,
// the creator's home issues it a ticket) each train 3 outer steps with one
// ring of both.
func TestAdmissionCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process e2e test")
	}
	const steps = 3
	local := append([]string{"--min-members", "2", "--max-outer-steps", fmt.Sprint(steps)}, simArgs...)
	t.Run("psk", func(t *testing.T) {
		a := startNode(t, "a", "", append([]string{"--run", "private", "--admission", "psk"}, local...)...)
		boot := bootstrapAddr(t, a)
		key := filepath.Join(a.home, node.PSKFile)
		if raw, err := os.ReadFile(key); err != nil {
			t.Fatalf("the creator wrote no key to its home: %v", err)
		} else if k, err := pnet.DecodeV1PSK(bytes.NewReader(raw)); err != nil || len(k) != 32 {
			t.Fatalf("the creator's key %s: %v", key, err)
		}
		b := startNode(t, "b", "", append([]string{"--bootstrap", boot, "--psk-file", key}, local...)...)
		waitDone(t, steps, a, b)
	})
	t.Run("allowlist", func(t *testing.T) {
		a := startNode(t, "a", "", append([]string{"--run", "invited", "--admission", "allowlist"}, local...)...)
		boot := bootstrapAddr(t, a)
		home := t.TempDir()
		id := strings.TrimSpace(runCommand(t, "id", "--home", home))
		ticket := filepath.Join(t.TempDir(), "b.ticket")
		runCommand(t, "admit", "--peer", id, "--home", a.home, "--expires", "1h", "--out", ticket)
		b := startNode(t, "b", home, append([]string{"--bootstrap", boot, "--ticket", ticket}, local...)...)
		waitDone(t, steps, a, b)
	})
}

// TestPSKNew: `psk new` writes a key libp2p reads, never over a file, and
// prints one without --out.
func TestPSKNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "swarm.key")
	if err := runPSK([]string{"new", "--out", path}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if k, err := pnet.DecodeV1PSK(f); err != nil || len(k) != 32 {
		t.Fatalf("key file: %v", err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", st.Mode().Perm())
	}
	if err := runPSK([]string{"new", "--out", path}); err == nil {
		t.Fatal("replaced an existing key file")
	}
	if err := runPSK([]string{"old"}); err == nil || !strings.Contains(err.Error(), "psk new") {
		t.Fatalf("psk old: %v", err)
	}
	if out := runCommand(t, "psk", "new"); !strings.HasPrefix(out, "/key/swarm/psk/1.0.0/\n/base16/\n") || len(out) != 21+1+8+1+64+1 {
		t.Fatalf("psk new printed %q", out)
	}
}

// TestAdmitRefuses: admit needs a peer, a home with a run manifest, of an
// allowlist run this home created.
func TestAdmitRefuses(t *testing.T) {
	id := strings.TrimSpace(runCommand(t, "id", "--home", t.TempDir()))
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no peer":    {[]string{"--home", t.TempDir()}, "--peer is required"},
		"bad peer":   {[]string{"--peer", "nobody", "--home", t.TempDir()}, "--peer"},
		"no run":     {[]string{"--peer", id, "--home", t.TempDir()}, "has no run manifest"},
		"stray args": {[]string{"--peer", id, "x"}, "unexpected argument"},
	} {
		if err := runAdmit(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
