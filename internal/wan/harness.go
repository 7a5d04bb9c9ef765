package wan

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/internal/emu"
)

// Device is the name of the TUN device in every host's namespace.
const Device = "wan0"

// Defaults of Options.
const (
	// DefaultTxQueueLen is the TUN device's transmit queue in packets: deep
	// enough that the forwarder falling behind for a moment does not show as
	// loss before the emulated queue.
	DefaultTxQueueLen = 10000
	// DefaultGrace is how long Close waits after SIGTERM before SIGKILL.
	DefaultGrace = 3 * time.Second
)

// Options configure Start. The zero value is usable.
type Options struct {
	// RateScale multiplies every rate of the profile (see RateScale); 0 means 1.
	RateScale float64
	// MTU of the TUN devices and the forwarder; 0 means emu.DefaultMTU.
	MTU int
	// NoOffload turns TCP segmentation offload on the TUN devices off, so
	// that the forwarder handles every 1500-byte packet on its own (exact
	// per-packet loss, several times the CPU per byte); see emu.Config.Offload.
	NoOffload bool
	// Seed seeds the links' random loss.
	Seed uint64
	// Prefix starts the namespaces' names; default DefaultPrefix.
	Prefix string
	// Sysctls are written in every namespace; nil means NamespaceSysctls.
	Sysctls []Sysctl
	// TxQueueLen of the TUN devices in packets; 0 means DefaultTxQueueLen.
	TxQueueLen int
	// Grace is how long Close lets commands exit after SIGTERM; 0 means DefaultGrace.
	Grace time.Duration
	// Log receives the harness's and the forwarder's logs; nil discards them.
	Log *slog.Logger
	// Subnet holds the hosts' addresses: host i gets SubnetAddr(Subnet, i).
	// The zero value means Prefix (10.77.0.0/24); it must be an IPv4 /24.
	// A NAT lab uses addresses libp2p counts as public (e.g. 11.77.0.0/24).
	Subnet netip.Prefix
}

func (o *Options) fill() {
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.MTU == 0 {
		o.MTU = emu.DefaultMTU
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Sysctls == nil {
		o.Sysctls = NamespaceSysctls
	}
	if o.TxQueueLen == 0 {
		o.TxQueueLen = DefaultTxQueueLen
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if !o.Subnet.IsValid() {
		o.Subnet = Prefix
	}
}

// Host is one host of a running Net.
type Host struct {
	// Index is the host's position in the profile, from 0.
	Index int
	// Name is the profile's name for the host.
	Name string
	// Netns is the namespace's name (ip netns exec NAME ...).
	Netns string
	// Addr is the host's address, 10.77.0.(Index+1) unless Options.Subnet
	// says otherwise.
	Addr netip.Addr
}

// NetnsPath is the file of the host's namespace.
func (h Host) NetnsPath() string { return filepath.Join(NetnsDir, h.Netns) }

// Net is a running emulated network. Close it; it is safe for concurrent use.
type Net struct {
	// Name is the run's unique name: <prefix>.<pid>.<random>.
	Name string
	// Profile is the geography, at paper scale.
	Profile Profile
	// Hosts are the hosts, in profile order.
	Hosts []Host

	opts    Options
	fwd     *emu.Forwarder
	stop    context.CancelFunc
	fwdDone chan error

	mu     sync.Mutex
	procs  []*Proc
	closed bool
}

// Start builds the network of profile p: a namespace per host with a TUN
// device, address, routes and sysctls, and a forwarder joining them. On any
// error everything made so far is removed again.
func Start(ctx context.Context, p Profile, opts Options) (*Net, error) {
	opts.fill()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := checkSubnet(opts.Subnet); err != nil {
		return nil, err
	}
	n := &Net{Name: runName(opts.Prefix), Profile: p, opts: opts}
	n.opts.Log = opts.Log.With("system", "wan", "run", n.Name)
	if err := n.build(ctx); err != nil {
		return nil, errors.Join(err, n.Close())
	}
	return n, nil
}

// runName returns <prefix>.<pid>.<4 random bytes in hex>.
func runName(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s.%d.%s", prefix, os.Getpid(), hex.EncodeToString(b[:]))
}

func (n *Net) build(ctx context.Context) error {
	paths := make([]string, len(n.Profile.Hosts))
	for i, ph := range n.Profile.Hosts {
		h := Host{Index: i, Name: ph.Name, Netns: n.Name + "." + ph.Name, Addr: SubnetAddr(n.opts.Subnet, i)}
		if err := ip(ctx, "", "netns", "add", h.Netns); err != nil {
			return err
		}
		n.Hosts = append(n.Hosts, h)
		paths[i] = h.NetnsPath()
		if err := n.configure(ctx, h); err != nil {
			return err
		}
	}
	cfg, err := n.Profile.Config(paths, n.opts)
	if err != nil {
		return err
	}
	n.fwd, err = emu.New(cfg, n.opts.Log)
	if err != nil {
		return err
	}
	fctx, stop := context.WithCancel(context.Background())
	n.stop, n.fwdDone = stop, make(chan error, 1)
	go func() { n.fwdDone <- n.fwd.Run(fctx) }()
	n.opts.Log.Info("network up", "profile", n.Profile.Name, "hosts", len(n.Hosts), "rate_scale", n.opts.RateScale)
	return nil
}

// configure writes the sysctls of host h's namespace, then makes its TUN
// device (persistent, so that the forwarder attaches to it) and brings it
// and loopback up. The sysctls go first so that the device never sees IPv6
// chatter, which it would drop while no forwarder reads it yet.
func (n *Net) configure(ctx context.Context, h Host) error {
	if err := WriteSysctls(h.NetnsPath(), n.opts.Sysctls); err != nil {
		return err
	}
	batch := fmt.Sprintf("link set lo up\ntuntap add dev %s mode tun\n"+
		"link set %s mtu %d txqueuelen %d up\naddr add %s dev %s\n",
		Device, Device, n.opts.MTU, n.opts.TxQueueLen, netip.PrefixFrom(h.Addr, n.opts.Subnet.Bits()), Device)
	return ip(ctx, batch, "-n", h.Netns, "-batch", "-")
}

// MTU is the links' MTU in bytes.
func (n *Net) MTU() int { return n.opts.MTU }

// Forwarder is the emulator joining the hosts, for its statistics.
func (n *Net) Forwarder() *emu.Forwarder { return n.fwd }

// SetPath changes the path between hosts a and b, both ways, while the
// network runs; the rate is at paper scale like the profile's. Loss 1 cuts
// the path (a partition); setting the old values heals it.
func (n *Net) SetPath(a, b string, p Path) error {
	l := emu.Link{DelayMS: p.RTTMS / 2, RateMbit: p.RateMbit * n.opts.RateScale, Loss: p.Loss}
	return errors.Join(n.fwd.SetLink(a, b, l), n.fwd.SetLink(b, a, l))
}

// Listen opens a listener inside host i's namespace, e.g. Listen(1, "tcp", ":7000").
func (n *Net) Listen(i int, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := emu.InNetns(n.Hosts[i].NetnsPath(), func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenPacket opens a packet socket inside host i's namespace, e.g.
// ListenPacket(1, "udp", ":9000").
func (n *Net) ListenPacket(i int, network, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := emu.InNetns(n.Hosts[i].NetnsPath(), func() error {
		var err error
		c, err = net.ListenPacket(network, addr)
		return err
	})
	return c, err
}

// Dial connects from inside host i's namespace.
func (n *Net) Dial(ctx context.Context, i int, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := emu.InNetns(n.Hosts[i].NetnsPath(), func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// HTTPClient returns a client whose connections are made inside host i's
// namespace, e.g. to read a node's status API on 127.0.0.1 there.
func (n *Net) HTTPClient(i int) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return n.Dial(ctx, i, network, addr)
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 30 * time.Second}
}

// Command returns a command running argv inside host i's namespace (through
// ip netns exec), in its own process group, with placeholders in argv
// expanded (see Expand) and the environment variables WAN_RUN, WAN_HOST,
// WAN_INDEX, WAN_ADDR, WAN_ADDRS (all hosts, comma-separated) and WAN_NETNS
// added. Start it with StartCommand so that Close stops it.
func (n *Net) Command(i int, argv ...string) *exec.Cmd {
	h := n.Hosts[i]
	args := append([]string{"netns", "exec", h.Netns}, n.Expand(i, argv)...)
	cmd := exec.Command("ip", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	addrs := make([]string, len(n.Hosts))
	for k, o := range n.Hosts {
		addrs[k] = o.Addr.String()
	}
	cmd.Env = append(os.Environ(), "WAN_RUN="+n.Name, "WAN_HOST="+h.Name,
		"WAN_INDEX="+strconv.Itoa(i), "WAN_ADDR="+h.Addr.String(),
		"WAN_ADDRS="+strings.Join(addrs, ","), "WAN_NETNS="+h.Netns)
	return cmd
}

// Expand replaces, in each argument, {host} by host i's name, {index} by i,
// {addr} by its address, {netns} by its namespace and {addrK} by host K's
// address (K from 0), e.g. --bootstrap /ip4/{addr0}/tcp/4001.
func (n *Net) Expand(i int, argv []string) []string {
	pairs := []string{"{host}", n.Hosts[i].Name, "{index}", strconv.Itoa(i),
		"{addr}", n.Hosts[i].Addr.String(), "{netns}", n.Hosts[i].Netns}
	for k := len(n.Hosts) - 1; k >= 0; k-- { // {addr10} before {addr1}
		pairs = append(pairs, "{addr"+strconv.Itoa(k)+"}", n.Hosts[k].Addr.String())
	}
	r := strings.NewReplacer(pairs...)
	out := make([]string, len(argv))
	for k, a := range argv {
		out[k] = r.Replace(a)
	}
	return out
}

// Proc is a command started in a namespace.
type Proc struct {
	// Host is where it runs.
	Host Host
	// Cmd is the started command.
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns its error.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// ErrClosed is returned when starting a command in a closed Net.
var ErrClosed = errors.New("wan: network closed")

// StartCommand starts cmd (made by Command for host i) and tracks it, so
// that Close stops it.
func (n *Net) StartCommand(i int, cmd *exec.Cmd) (*Proc, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("wan: start on %s: %w", n.Hosts[i].Name, err)
	}
	p := &Proc{Host: n.Hosts[i], Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	n.procs = append(n.procs, p)
	return p, nil
}

// StartAll starts argv on every host (placeholders expanded per host), with
// stdout and stderr going to out(i) (nil out or a nil writer discards).
func (n *Net) StartAll(argv []string, out func(i int) io.Writer) ([]*Proc, error) {
	var procs []*Proc
	for i := range n.Hosts {
		cmd := n.Command(i, argv...)
		if out != nil {
			w := out(i)
			cmd.Stdout, cmd.Stderr = w, w
		}
		p, err := n.StartCommand(i, cmd)
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// Close stops every command (SIGTERM to its process group, SIGKILL after
// Options.Grace), stops the forwarder and deletes the namespaces. It is
// idempotent and runs to the end even if a step fails.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	procs := n.procs
	n.mu.Unlock()
	stopProcs(procs, n.opts.Grace)
	var errs []error
	if n.stop != nil {
		n.stop()
		errs = append(errs, <-n.fwdDone)
	}
	for _, h := range n.Hosts {
		errs = append(errs, DeleteNetns(h.Netns))
	}
	n.opts.Log.Info("network removed", "hosts", len(n.Hosts))
	return errors.Join(errs...)
}

// stopProcs sends SIGTERM to each process group, waits up to grace for all
// to exit, then kills what is left.
func stopProcs(procs []*Proc, grace time.Duration) {
	for _, p := range procs {
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			for _, q := range procs {
				syscall.Kill(-q.Cmd.Process.Pid, syscall.SIGKILL)
			}
			<-p.done
		}
	}
	for _, p := range procs {
		<-p.done
	}
}
