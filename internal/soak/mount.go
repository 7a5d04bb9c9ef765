package soak

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/intellect-node/intellect-node/internal/wan"
)

// MountSource starts the source name of every tmpfs a soak mounts:
// isoak.<pid of the soak>, so that CleanupMounts finds those of a soak
// that no longer runs.
const MountSource = "isoak"

// MountTmpfs mounts a tmpfs of size bytes on dir (made if missing), its
// source named MountSource.<pid>.
func MountTmpfs(dir string, size int64) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	src := fmt.Sprintf("%s.%d", MountSource, os.Getpid())
	if err := syscall.Mount(src, dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return fmt.Errorf("soak: mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// Unmount detaches the file system mounted on dir (lazily: processes still
// using it keep it until they exit).
func Unmount(dir string) error {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("soak: unmount %s: %w", dir, err)
	}
	return nil
}

// Fill grows the file dir/name so that it leaves free bytes available on
// dir's file system (nothing if less is available already) and returns its
// size. Called again, it tops the file up: space freed since (a member
// pruning its oldest checkpoint after a write) is taken again.
func Fill(dir, name string, free int64) (int64, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, errors.Join(err, f.Close())
	}
	grow, err := Available(dir)
	if grow -= free; err != nil || grow <= 0 {
		return st.Size(), errors.Join(err, f.Close())
	}
	err = syscall.Fallocate(int(f.Fd()), 0, st.Size(), grow)
	return st.Size() + grow, errors.Join(err, f.Close())
}

// Available returns the bytes available on dir's file system.
func Available(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("soak: statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// mountsOf returns the mount points in a /proc/mounts text whose source
// is MountSource.<pid> with a pid for which dead reports true.
func mountsOf(r io.Reader, dead func(pid int) bool) []string {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[2] != "tmpfs" {
			continue
		}
		pidField, ok := strings.CutPrefix(f[0], MountSource+".")
		if !ok {
			continue
		}
		if pid, err := strconv.Atoi(pidField); err != nil || dead(pid) {
			out = append(out, unescapeMount(f[1]))
		}
	}
	return out
}

// unescapeMount undoes /proc/mounts' octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CleanupMounts unmounts the tmpfs mounts of soaks that no longer run (all
// of them with all) and returns their mount points.
func CleanupMounts(all bool) ([]string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dirs := mountsOf(f, func(pid int) bool { return all || !wan.Alive(pid) })
	var errs []error
	for _, d := range dirs {
		errs = append(errs, Unmount(d))
	}
	return dirs, errors.Join(errs...)
}
