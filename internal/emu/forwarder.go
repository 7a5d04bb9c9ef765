package emu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// freeBuffers is how many idle packet buffers of each size the forwarder
// keeps for reuse.
const freeBuffers = 1 << 14

// maxPacket is the largest packet a TUN device hands over (IPv4's limit).
const maxPacket = 65535

// Forwarder moves packets between the hosts' TUN devices through the
// emulated links. Create it with New, run it with Run.
type Forwarder struct {
	cfg   Config
	log   *slog.Logger
	tuns  []*os.File
	route map[netip.Addr]int
	links [][]*link // [from][to], nil on the diagonal
	hosts []HostStats
	epoch time.Time
	hdr   int // bytes of virtio_net_hdr before each packet: 0 or VnetHdrLen
	// Packet buffers: small ones hold one MTU, big ones a super-packet.
	small, big         chan []byte
	smallSize, bigSize int
}

// link is the state of one directed link. The reader goroutine of its source
// host admits packets; its own goroutine delivers them.
type link struct {
	from, to int
	mu       sync.Mutex // guards bucket, loss, delay, q
	bucket   Bucket
	loss     Loss
	delay    int64 // ns
	q        DelayQueue
	wake     chan struct{} // signalled when q goes from empty to non-empty
	stats    LinkStats
}

// LinkStats counts what happened on one link. Fields are updated atomically.
type LinkStats struct {
	// Packets and Bytes count what was delivered to the far end, in wire
	// segments and their bytes (a super-packet counts as its segments).
	Packets, Bytes atomic.Uint64
	// Offered counts the segments handed to the link, before loss and queue.
	Offered atomic.Uint64
	// QueueDrops counts packets dropped because the drop-tail queue was full.
	QueueDrops atomic.Uint64
	// LossDrops counts packets dropped at random (Link.Loss).
	LossDrops atomic.Uint64
	// WriteErrors counts packets the far end's TUN device refused.
	WriteErrors atomic.Uint64
}

// HostStats counts packets from one host that no link took.
type HostStats struct {
	// Unroutable counts packets that were not IPv4 or went to an address of
	// no other host.
	Unroutable atomic.Uint64
	// Oversize counts packets longer than the MTU.
	Oversize atomic.Uint64
}

// New validates cfg and attaches to (creating if needed) every host's TUN
// device. The devices are not configured here: addresses, MTU and up state
// are the caller's (wanbench sets them). Close releases them if Run is never
// called. A nil log discards.
func New(cfg Config, log *slog.Logger) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, _ := cfg.Matrix()
	f := &Forwarder{
		cfg: cfg, log: log.With("system", "linkemu"), route: map[netip.Addr]int{},
		hosts: make([]HostStats, len(cfg.Hosts)), epoch: time.Now(),
		small: make(chan []byte, freeBuffers), smallSize: cfg.MTU + 1,
	}
	f.bigSize = f.smallSize
	if cfg.Offload {
		f.hdr, f.bigSize = VnetHdrLen, VnetHdrLen+maxPacket+1
		f.smallSize += VnetHdrLen
		f.big = make(chan []byte, freeBuffers/16)
	}
	for i, h := range cfg.Hosts {
		t, err := OpenTUN(h.Netns, h.Dev, cfg.Offload)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("emu: host %s: %w", h.Name, err)
		}
		f.tuns = append(f.tuns, t)
		f.route[h.Addr] = i
	}
	f.links = make([][]*link, len(cfg.Hosts))
	for i := range f.links {
		f.links[i] = make([]*link, len(cfg.Hosts))
		for j := range f.links[i] {
			if i != j {
				f.links[i][j] = &link{from: i, to: j, wake: make(chan struct{}, 1)}
				f.links[i][j].set(m[i][j], cfg.MTU, cfg.Seed, uint64(i*MaxHosts+j))
			}
		}
	}
	return f, nil
}

// set applies the parameters of l, keeping the bucket's clock.
func (l *link) set(p Link, mtu int, seed, stream uint64) {
	b := p.Bucket(mtu)
	b.tat = l.bucket.tat
	l.bucket = b
	l.loss = NewLoss(p.Loss, seed, stream)
	l.delay = int64(p.Delay())
}

// SetLink changes the link from→to while the forwarder runs (to cut a
// partition, say with Loss 1, or to heal it). Packets in flight keep the
// delay they were given. It may be called concurrently with Run.
func (f *Forwarder) SetLink(from, to string, p Link) error {
	i, j := f.index(from), f.index(to)
	if i < 0 || j < 0 || i == j {
		return fmt.Errorf("%w: link %s→%s: unknown or self pair", ErrConfig, from, to)
	}
	p.From, p.To = from, to
	if err := p.validate(); err != nil {
		return err
	}
	l := f.links[i][j]
	l.mu.Lock()
	l.set(p, f.cfg.MTU, f.cfg.Seed+uint64(time.Since(f.epoch)), uint64(i*MaxHosts+j))
	l.mu.Unlock()
	return nil
}

func (f *Forwarder) index(name string) int {
	for i, h := range f.cfg.Hosts {
		if h.Name == name {
			return i
		}
	}
	return -1
}

// Run forwards packets until ctx is done, then closes the TUN devices and
// returns nil; it returns an error if reading a device fails otherwise.
func (f *Forwarder) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, len(f.tuns))
	for i := range f.tuns {
		wg.Go(func() {
			if err := f.read(i); err != nil {
				errs <- err
				cancel()
			}
		})
		for _, l := range f.links[i] {
			if l != nil {
				wg.Go(func() { f.deliver(ctx, l) })
			}
		}
	}
	<-ctx.Done()
	f.Close()
	wg.Wait()
	cancel()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// Close closes the TUN devices; a running Run then returns.
func (f *Forwarder) Close() {
	for _, t := range f.tuns {
		t.Close()
	}
}

// now is the forwarder's monotonic clock in ns.
func (f *Forwarder) now() int64 { return int64(time.Since(f.epoch)) }

// read takes packets from host i's device and hands them to their links.
func (f *Forwarder) read(i int) error {
	tun := f.tuns[i]
	rb := f.bigBuffer()
	for {
		n, err := tun.Read(rb)
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("emu: read %s: %w", f.cfg.Hosts[i].Dev, err)
		}
		j, segs, wire, ok := f.classify(i, rb[:n])
		if !ok {
			continue
		}
		var pkt []byte
		if n <= f.smallSize && f.bigSize > f.smallSize {
			pkt = append(f.smallBuffer(), rb[:n]...)
		} else {
			pkt, rb = rb[:n], f.bigBuffer()
		}
		if !f.links[i][j].admit(f.now(), pkt, segs, wire) {
			f.release(pkt)
		}
	}
}

// classify finds the host a packet read from host i goes to and the
// segments and wire bytes it stands for; it counts and rejects packets that
// are too long, malformed, or for no other host.
func (f *Forwarder) classify(i int, b []byte) (to, segs, wire int, ok bool) {
	st := &f.hosts[i]
	if len(b) < f.hdr {
		st.Unroutable.Add(1)
		return 0, 0, 0, false
	}
	pkt := b[f.hdr:]
	segs, wire = 1, len(pkt)
	if f.hdr > 0 {
		var err error
		if segs, wire, err = Segments(b[:f.hdr], pkt); err != nil {
			st.Unroutable.Add(1)
			return 0, 0, 0, false
		}
	}
	if segs == 1 && len(pkt) > f.cfg.MTU || len(b) == f.bigSize {
		st.Oversize.Add(1)
		return 0, 0, 0, false
	}
	dst, err := Destination(pkt)
	to, found := f.route[dst]
	if err != nil || !found || to == i {
		st.Unroutable.Add(1)
		return 0, 0, 0, false
	}
	return to, segs, wire, true
}

// admit runs a packet standing for segs wire segments of wire bytes in all
// through loss and the bucket, and queues it for delivery.
func (l *link) admit(now int64, pkt []byte, segs, wire int) bool {
	l.stats.Offered.Add(uint64(segs))
	l.mu.Lock()
	if l.loss.DropSegments(segs) {
		l.mu.Unlock()
		l.stats.LossDrops.Add(1)
		return false
	}
	depart, ok := l.bucket.Admit(now, wire)
	if !ok {
		l.mu.Unlock()
		l.stats.QueueDrops.Add(1)
		return false
	}
	wasEmpty := l.q.Len() == 0
	l.q.Push(depart+l.bucket.TxTime(wire)+l.delay, pkt) // last bit's arrival
	l.mu.Unlock()
	if wasEmpty {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// deliver writes the packets of link l to the far end when they are due.
// One goroutine per link; it sleeps until the oldest packet is due and then
// writes every packet due by then, so a late wake-up costs no packets.
func (f *Forwarder) deliver(ctx context.Context, l *link) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	tun := f.tuns[l.to]
	var batch [][]byte
	for {
		l.mu.Lock()
		now := f.now()
		batch = l.q.PopDue(now, batch[:0])
		next, pending := l.q.Next()
		l.mu.Unlock()
		if len(batch) > 0 {
			f.write(tun, l, batch)
			continue
		}
		wait := l.wake
		var tick <-chan time.Time
		if pending {
			timer.Reset(time.Duration(next - now))
			wait, tick = nil, timer.C
		}
		select {
		case <-wait:
		case <-tick:
		case <-ctx.Done():
			return
		}
	}
}

// write delivers a batch to the far end's device and recycles the buffers.
func (f *Forwarder) write(tun *os.File, l *link, batch [][]byte) {
	for k, p := range batch {
		if _, err := tun.Write(p); err != nil {
			l.stats.WriteErrors.Add(1)
			f.log.Debug("deliver", "from", f.cfg.Hosts[l.from].Name, "to", f.cfg.Hosts[l.to].Name, "err", err)
		} else {
			segs, wire := 1, len(p)
			if f.hdr > 0 {
				segs, wire, _ = Segments(p[:f.hdr], p[f.hdr:])
			}
			l.stats.Packets.Add(uint64(segs))
			l.stats.Bytes.Add(uint64(wire))
		}
		f.release(p)
		batch[k] = nil
	}
}

// smallBuffer returns an empty buffer with room for one MTU.
func (f *Forwarder) smallBuffer() []byte {
	select {
	case b := <-f.small:
		return b[:0]
	default:
		return make([]byte, 0, f.smallSize)
	}
}

// bigBuffer returns a read buffer one byte longer than the largest packet
// (header included), so that a longer one shows as oversize instead of
// being cut silently.
func (f *Forwarder) bigBuffer() []byte {
	if f.big == nil {
		return f.smallBuffer()[:f.smallSize]
	}
	select {
	case b := <-f.big:
		return b[:cap(b)]
	default:
		return make([]byte, f.bigSize)
	}
}

// release recycles a packet buffer by its capacity.
func (f *Forwarder) release(b []byte) {
	free := f.small
	if cap(b) != f.smallSize {
		free = f.big
	}
	select {
	case free <- b:
	default:
	}
}

// LinkReport is a snapshot of one link's counters.
type LinkReport struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Offered     uint64 `json:"offered"`
	Packets     uint64 `json:"packets"`
	Bytes       uint64 `json:"bytes"`
	QueueDrops  uint64 `json:"queue_drops"`
	LossDrops   uint64 `json:"loss_drops"`
	WriteErrors uint64 `json:"write_errors"`
	// Queued is the number of packets in flight on the link.
	Queued int `json:"queued"`
}

// HostReport is a snapshot of one host's counters.
type HostReport struct {
	Name       string `json:"name"`
	Unroutable uint64 `json:"unroutable"`
	Oversize   uint64 `json:"oversize"`
}

// Report is a snapshot of all counters.
type Report struct {
	Links []LinkReport `json:"links"`
	Hosts []HostReport `json:"hosts"`
}

// Stats returns a snapshot of the counters. It may be called concurrently with Run.
func (f *Forwarder) Stats() Report {
	var r Report
	for i, h := range f.cfg.Hosts {
		r.Hosts = append(r.Hosts, HostReport{Name: h.Name, Unroutable: f.hosts[i].Unroutable.Load(), Oversize: f.hosts[i].Oversize.Load()})
		for _, l := range f.links[i] {
			if l == nil {
				continue
			}
			l.mu.Lock()
			queued := l.q.Len()
			l.mu.Unlock()
			r.Links = append(r.Links, LinkReport{
				From: h.Name, To: f.cfg.Hosts[l.to].Name, Offered: l.stats.Offered.Load(), Packets: l.stats.Packets.Load(), Bytes: l.stats.Bytes.Load(),
				QueueDrops: l.stats.QueueDrops.Load(), LossDrops: l.stats.LossDrops.Load(),
				WriteErrors: l.stats.WriteErrors.Load(), Queued: queued,
			})
		}
	}
	return r
}

// Link returns the report of the link from→to, or false if there is none.
func (r Report) Link(from, to string) (LinkReport, bool) {
	for _, l := range r.Links {
		if l.From == from && l.To == to {
			return l, true
		}
	}
	return LinkReport{}, false
}
