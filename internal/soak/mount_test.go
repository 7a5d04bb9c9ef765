package soak

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestMountsOf(t *testing.T) {
	mounts := strings.Join([]string{
		"/dev/vda / ext4 rw 0 0",
		"isoak.100 /tmp/soak/homes/chi.1 tmpfs rw,size=262144k 0 0",
		"isoak.200 /tmp/soak\\040two/homes/x tmpfs rw 0 0",
		"isoak.bad /tmp/odd tmpfs rw 0 0",
		"tmpfs /run tmpfs rw 0 0",
		"isoak.300 /tmp/not-tmpfs ext4 rw 0 0",
	}, "\n")
	dead := func(pid int) bool { return pid != 200 }
	got := mountsOf(strings.NewReader(mounts), dead)
	want := []string{"/tmp/soak/homes/chi.1", "/tmp/odd"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("leftover mounts %q, want %q", got, want)
	}
	all := mountsOf(strings.NewReader(mounts), func(int) bool { return true })
	if len(all) != 3 || all[1] != "/tmp/soak two/homes/x" {
		t.Fatalf("all mounts %q", all)
	}
}

// TestTmpfsFill mounts a small tmpfs (root only), fills it to leave 1 MiB,
// and cleans it up as a dead soak's.
func TestTmpfsFill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount)")
	}
	dir := filepath.Join(t.TempDir(), "home")
	if err := MountTmpfs(dir, 8<<20); err != nil {
		t.Fatal(err)
	}
	defer Unmount(dir)
	n, err := Fill(dir, "filler", 1<<20)
	if err != nil || n <= 0 {
		t.Fatalf("fill: %d, %v", n, err)
	}
	avail, err := Available(dir)
	if err != nil || avail < 1<<20-4096 || avail > 1<<20+4096 {
		t.Fatalf("available after the fill: %d, %v, want 1 MiB", avail, err)
	}
	err = os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o600)
	if !errorsIsNoSpace(err) {
		t.Fatalf("writing 2 MiB into 1 MiB: %v, want ENOSPC", err)
	}
	// Space freed since (a pruned checkpoint) is taken again by a top-up.
	if err := os.Remove(filepath.Join(dir, "big")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old"), make([]byte, 512<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	if avail, _ := Available(dir); avail < 1<<20-4096 {
		t.Fatalf("available after a write and its removal: %d", avail)
	}
	if err := os.Truncate(filepath.Join(dir, "filler"), n-(2<<20)); err != nil { // 2 MiB freed
		t.Fatal(err)
	}
	m, err := Fill(dir, "filler", 1<<20)
	if err != nil || m <= n-(2<<20) {
		t.Fatalf("top-up: %d (was %d), %v", m, n-(2<<20), err)
	}
	if avail, err := Available(dir); err != nil || avail > 1<<20+4096 {
		t.Fatalf("available after the top-up: %d, %v, want 1 MiB", avail, err)
	}
}

func errorsIsNoSpace(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == syscall.ENOSPC
}
