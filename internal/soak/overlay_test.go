package soak

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestClockOverlay builds a program with the overlay and runs it with and
// without SkewEnv: its wall clock moves by the offset, its monotonic clock
// (time.Since) does not.
func TestClockOverlay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program (-short)")
	}
	dir := t.TempDir()
	ov, err := WriteClockOverlay(runtime.GOROOT(), filepath.Join(dir, "overlay"))
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	os.MkdirAll(prog, 0o755)
	os.WriteFile(filepath.Join(prog, "go.mod"), []byte("module prog\n\ngo 1.26\n"), 0o644)
	os.WriteFile(filepath.Join(prog, "main.go"), []byte(`package main

import (
	"fmt"
	"time"
)

func main() {
	start := time.Now()
	time.Sleep(50 * time.Millisecond)
	fmt.Println(start.Unix(), time.Since(start) >= 50*time.Millisecond && time.Since(start) < 10*time.Second)
}
`), 0o644)
	bin := filepath.Join(dir, "prog.bin")
	build := exec.Command("go", "build", "-overlay", ov, "-o", bin, ".")
	build.Dir = prog
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build with the overlay: %v\n%s", err, out)
	}
	for _, skew := range []time.Duration{0, -5 * time.Minute, 5 * time.Minute} {
		cmd := exec.Command(bin)
		if skew != 0 {
			cmd.Env = append(os.Environ(), SkewEnv+"="+skew.String())
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		var unix int64
		var since bool
		if _, err := fmt.Sscan(string(out), &unix, &since); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		if off := time.Unix(unix, 0).Sub(time.Now()) - skew; off < -5*time.Second || off > 5*time.Second || !since {
			t.Errorf("skew %v: wall clock off by %v from it, time.Since right: %v", skew, off, since)
		}
	}
}

func TestClockOverlayFiles(t *testing.T) {
	dir := t.TempDir()
	ov, err := WriteClockOverlay(runtime.GOROOT(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var o struct{ Replace map[string]string }
	b, _ := os.ReadFile(ov)
	if err := json.Unmarshal(b, &o); err != nil || len(o.Replace) != 2 {
		t.Fatalf("overlay %s: %v", b, err)
	}
	patched, _ := os.ReadFile(filepath.Join(dir, "time.go"))
	if !strings.Contains(string(patched), "sec, nsec, mono := skewedNow()") {
		t.Fatal("time.Now not patched")
	}
	if _, err := WriteClockOverlay(t.TempDir(), dir); err == nil {
		t.Fatal("an overlay from a GOROOT without time.go")
	}
}
