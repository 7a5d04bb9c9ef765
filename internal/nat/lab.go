package nat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/internal/emu"
	"github.com/intellect-node/intellect-node/internal/wan"
)

// LANSuffix ends the name of a home LAN's namespace:
// <run>.<site>-lan, so that `wanbench cleanup` (make wan-cleanup) finds it
// by the same <prefix>.<pid>. rule as the run's other namespaces.
const LANSuffix = "-lan"

// Lab is a running NAT lab. Close it; it is safe for concurrent use.
type Lab struct {
	// Net is the public segment: one namespace per site (the public member's,
	// or the router's) joined by the link emulator.
	Net *wan.Net
	// Topology is what was built.
	Topology Topology
	// lans[i] is site i's LAN namespace, "" for a public site.
	lans []string
}

// Start builds topology t: the wan network of its profile on PublicSubnet
// (with IP forwarding on), then for every NATed site a LAN namespace joined
// to the site's namespace (now its router) by a veth pair, and the router's
// NAT and filter rules. On any error everything made so far is removed.
func Start(ctx context.Context, t Topology, opts wan.Options) (*Lab, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	opts.Subnet = PublicSubnet
	opts.Sysctls = append(append([]wan.Sysctl(nil), wan.NamespaceSysctls...), wan.Sysctl{Key: "net.ipv4.ip_forward", Value: "1"})
	n, err := wan.Start(ctx, t.Profile, opts)
	if err != nil {
		return nil, err
	}
	l := &Lab{Net: n, Topology: t, lans: make([]string, len(t.Kinds))}
	for i, k := range t.Kinds {
		if k == Public {
			continue
		}
		if err := l.addHome(ctx, i, k); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	return l, nil
}

// addHome makes site i's LAN namespace, the veth pair to the router and
// the router's rules.
func (l *Lab) addHome(ctx context.Context, i int, k Kind) error {
	router := l.Net.Hosts[i].Netns
	lan := router + LANSuffix
	if err := run(ctx, "", "ip", "netns", "add", lan); err != nil {
		return err
	}
	l.lans[i] = lan
	if err := wan.WriteSysctls(filepath.Join(wan.NetnsDir, lan), wan.NamespaceSysctls); err != nil {
		return err
	}
	if err := run(ctx, lanBatch(lan), "ip", "-n", router, "-batch", "-"); err != nil {
		return err
	}
	if err := run(ctx, memberBatch(), "ip", "-n", lan, "-batch", "-"); err != nil {
		return err
	}
	rules, err := RouterRules(k)
	if err != nil {
		return err
	}
	return run(ctx, rules, "ip", "netns", "exec", router, "iptables-restore")
}

// run runs argv with stdin and returns its error with its stderr.
func run(ctx context.Context, stdin string, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var errBuf bytes.Buffer
	cmd.Stdin, cmd.Stderr = strings.NewReader(stdin), &errBuf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nat: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(errBuf.String()))
	}
	return nil
}

// MemberNetns is the namespace site i's member runs in.
func (l *Lab) MemberNetns(i int) string {
	if l.lans[i] != "" {
		return l.lans[i]
	}
	return l.Net.Hosts[i].Netns
}

// RouterNetns is site i's router namespace, "" for a public site.
func (l *Lab) RouterNetns(i int) string {
	if l.lans[i] == "" {
		return ""
	}
	return l.Net.Hosts[i].Netns
}

// Command returns a command running argv in site i's member namespace
// (through ip netns exec), in its own process group. Start it with
// StartCommand so that Close stops it.
func (l *Lab) Command(i int, argv ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", l.MemberNetns(i)}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// StartCommand starts cmd (made by Command for site i) and tracks it so
// that Close stops it.
func (l *Lab) StartCommand(i int, cmd *exec.Cmd) (*wan.Proc, error) {
	return l.Net.StartCommand(i, cmd)
}

// Dial connects from inside site i's member namespace.
func (l *Lab) Dial(ctx context.Context, i int, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := emu.InNetns(filepath.Join(wan.NetnsDir, l.MemberNetns(i)), func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// HTTPClient returns a client whose connections are made inside site i's
// member namespace, to read its node's status API on loopback there.
func (l *Lab) HTTPClient(i int, timeout time.Duration) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return l.Dial(ctx, i, network, addr)
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: timeout}
}

// Close stops every command, removes the public segment and deletes the LAN
// namespaces (their veths and the routers' rules go with the namespaces).
// It is idempotent and runs to the end even if a step fails.
func (l *Lab) Close() error {
	errs := []error{l.Net.Close()}
	for _, lan := range l.lans {
		if lan == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(wan.NetnsDir, lan)); err == nil {
			errs = append(errs, wan.DeleteNetns(lan))
		}
	}
	return errors.Join(errs...)
}

// inMember runs fn on a thread inside site i's member namespace.
func inMember(l *Lab, i int, fn func() error) error {
	return emu.InNetns(filepath.Join(wan.NetnsDir, l.MemberNetns(i)), fn)
}

// listenMember opens a TCP listener inside site i's member namespace.
func listenMember(l *Lab, i int, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inMember(l, i, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}
