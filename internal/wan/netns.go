package wan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/intellect-node/intellect-node/internal/emu"
)

// NetnsDir is where iproute2 keeps named network namespaces.
const NetnsDir = "/var/run/netns"

// DefaultPrefix starts the name of every namespace this package makes:
// <prefix>.<pid of the creating process>.<random>.<host>.
const DefaultPrefix = "iwan"

// Sysctl is one kernel setting, written inside a namespace only.
type Sysctl struct {
	// Key is the dotted name, e.g. net.ipv4.tcp_wmem.
	Key string
	// Value is written as is.
	Value string
}

// NamespaceSysctls are the settings for long fat links that Start applies in
// every host's namespace (docs/wan.md explains each). They are per network
// namespace on Linux ≥ 4.15, so the machine's own settings are not touched.
var NamespaceSysctls = []Sysctl{
	{"net.ipv4.tcp_rmem", "4096 131072 33554432"},
	{"net.ipv4.tcp_wmem", "4096 16384 33554432"},
	{"net.ipv4.tcp_congestion_control", "bbr"},
	{"net.ipv4.tcp_slow_start_after_idle", "0"},
	{"net.ipv4.tcp_mtu_probing", "1"},
	{"net.ipv6.conf.all.disable_ipv6", "1"},
	{"net.ipv6.conf.default.disable_ipv6", "1"},
}

// ReadSysctl reads key inside the namespace at netns ("" = the caller's).
func ReadSysctl(netns, key string) (string, error) {
	var v []byte
	err := emu.InNetns(netns, func() error {
		var err error
		v, err = os.ReadFile(sysctlPath(key))
		return err
	})
	return strings.TrimSpace(string(v)), err
}

// WriteSysctls writes settings inside the namespace at netns (a file path).
func WriteSysctls(netns string, settings []Sysctl) error {
	return emu.InNetns(netns, func() error {
		for _, s := range settings {
			if err := os.WriteFile(sysctlPath(s.Key), []byte(s.Value), 0); err != nil {
				return fmt.Errorf("wan: sysctl %s=%s: %w", s.Key, s.Value, err)
			}
		}
		return nil
	})
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

// ip runs iproute2 with args and returns its error with its stderr.
func ip(ctx context.Context, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", args...)
	var errBuf bytes.Buffer
	cmd.Stdin, cmd.Stderr = strings.NewReader(stdin), &errBuf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("wan: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errBuf.String()))
	}
	return nil
}

// DeleteNetns kills every process left in the named namespace, then deletes
// it (and with it its devices, veth peers and iptables rules).
func DeleteNetns(name string) error {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return ip(context.Background(), "", "netns", "delete", name)
}

// Leftovers lists the namespaces made by this package (names starting with
// prefix+".") whose creating process no longer runs, or all of them with all.
func Leftovers(prefix string, all bool) ([]string, error) {
	entries, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wan: list namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix+".")
		if !ok {
			continue
		}
		pidField, _, _ := strings.Cut(rest, ".")
		pid, err := strconv.Atoi(pidField)
		if all || err != nil || !Alive(pid) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Alive reports whether process pid exists and is not a zombie (a killed
// run whose parent has not reaped it yet is dead for our purposes).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Fields: pid (comm) state ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// Cleanup deletes the namespaces Leftovers lists, killing the processes in
// them first, and returns the names deleted. A nil log discards.
func Cleanup(prefix string, all bool, log *slog.Logger) ([]string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names, err := Leftovers(prefix, all)
	if err != nil {
		return nil, err
	}
	var deleted []string
	var errs []error
	for _, n := range names {
		if err := DeleteNetns(n); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("deleted leftover namespace", "netns", n)
		deleted = append(deleted, n)
	}
	return deleted, errors.Join(errs...)
}

// HostDrops returns how many packets host i's kernel dropped at its TUN
// device because the forwarder had not read them in time (the device's TX
// drop counter). Non-zero means the machine was too busy to emulate the
// profile faithfully: those losses are not the profile's.
func (n *Net) HostDrops(i int) (uint64, error) {
	var drops uint64
	err := emu.InNetns(n.Hosts[i].NetnsPath(), func() error {
		data, err := os.ReadFile("/proc/thread-self/net/dev")
		if err != nil {
			return err
		}
		drops, err = txDrops(string(data), Device)
		return err
	})
	return drops, err
}

// txDrops parses /proc/net/dev text for the TX drop counter of dev.
func txDrops(procNetDev, dev string) (uint64, error) {
	for _, line := range strings.Split(procNetDev, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != dev {
			continue
		}
		// 8 receive fields, then TX: bytes packets errs drop ...
		f := strings.Fields(rest)
		if len(f) < 12 {
			break
		}
		return strconv.ParseUint(f[11], 10, 64)
	}
	return 0, fmt.Errorf("wan: no counters for %s in /proc/net/dev", dev)
}
