package soak

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SkewEnv names the environment variable that offsets the wall clock of a
// binary built with the clock overlay (WriteClockOverlay): a Go duration,
// e.g. "-5m". Unset or unparsable, the offset is 0.
const SkewEnv = "INTELLECT_SOAK_CLOCK_SKEW"

// nowCall is the line of the standard library's time.Now that reads the
// clock; the overlay replaces it.
const nowCall = "func Now() Time {\n\tsec, nsec, mono := runtimeNow()"

// skewSource is added to package time by the overlay: the offset, read once
// from SkewEnv, is added to the wall clock's seconds only, so that
// monotonic readings (time.Since, timers) are unaffected.
const skewSource = `package time

import "syscall"

// skewSeconds is the wall clock's offset, from ` + SkewEnv + ` (soak builds only).
var skewSeconds = func() int64 {
	s, ok := syscall.Getenv("` + SkewEnv + `")
	if !ok {
		return 0
	}
	d, err := ParseDuration(s)
	if err != nil {
		return 0
	}
	return int64(d / Second)
}()

// skewedNow is runtimeNow with the wall clock moved by skewSeconds.
func skewedNow() (sec int64, nsec int32, mono int64) {
	sec, nsec, mono = runtimeNow()
	return sec + skewSeconds, nsec, mono
}
`

// WriteClockOverlay writes into dir the files of a `go build -overlay`
// that makes time.Now read SkewEnv's offset: a copy of goroot's
// src/time/time.go whose Now calls skewedNow, the file defining it, and
// overlay.json, whose path it returns. A process without SkewEnv set runs
// as if built without it. Faketime cannot do this for Go binaries (they
// read the clock through the vDSO, not libc), and a time namespace offsets
// only the monotonic and boot clocks.
func WriteClockOverlay(goroot, dir string) (string, error) {
	src := filepath.Join(goroot, "src", "time", "time.go")
	b, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("soak: clock overlay: %w", err)
	}
	if n := strings.Count(string(b), nowCall); n != 1 {
		return "", fmt.Errorf("soak: clock overlay: %s has %d copies of time.Now's clock read, want 1 (a Go release that changed time.Now)", src, n)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	patched := strings.Replace(string(b), nowCall, strings.Replace(nowCall, "runtimeNow()", "skewedNow()", 1), 1)
	files := map[string]string{
		src: filepath.Join(dir, "time.go"),
		filepath.Join(goroot, "src", "time", "zz_soak_skew.go"): filepath.Join(dir, "zz_soak_skew.go"),
	}
	if err := os.WriteFile(files[src], []byte(patched), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "zz_soak_skew.go"), []byte(skewSource), 0o644); err != nil {
		return "", err
	}
	j, _ := json.MarshalIndent(struct{ Replace map[string]string }{files}, "", "  ")
	out := filepath.Join(dir, "overlay.json")
	return out, os.WriteFile(out, j, 0o644)
}
