package node

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/account"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/ckpt"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/intellect-node/intellect-node/p2p/scatter"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
)

// Node is one member of a training network. Create it with New, then Run it.
type Node struct {
	cfg Config
	log *slog.Logger
	// life lasts from start until Run is done with the network: work
	// that must outlive an attempt or a step (a gossip publication) runs in
	// it.
	life context.Context

	host *p2p.Host
	ar   *ring.Service
	sc   *scatter.Service
	// acct: robust averaging's accountability of this node (account.go).
	acct accountant
	// reducer averages the pseudo-gradients of a decided ring: ringReducer,
	// or scatterReducer with --averaging robust.
	reducer diloco.Reducer
	// pub publishes on the run's gossip topics: the host.
	pub publisher

	ckpt *ckpt.Server
	// ckptUpd serves the last step's update (update.go).
	ckptUpd *ckpt.Server
	upd     stepUpdate
	engine  train.Engine
	data    train.Source
	run     *runManifest  // the run manifest, fixed by New
	opts    train.Options // the manifest's training options (Worker: 0)
	mserv   *p2p.ManifestServer
	board   board
	api     *api
	met     *metrics
	self    mesh.PeerID

	cred credentials // the key or ticket this node joins its run with (admission.go)

	model  *diloco.Model // θ₀, v, step, hash: written by the training goroutine only
	loop   *diloco.Loop  // the DiLoCo loop, once trainLoop made it
	params int64

	meshCmds chan meshCmd
	events   chan diloco.Event
	// wanted is the model the mesh asks this node to fetch (nil: none), as
	// of the mesh goroutine's last event: a fetch request the loop takes
	// up later than that is carried out only if it is still this one.
	wanted   atomic.Pointer[fetchKey]
	sendRate *p2p.Limiter // nil: unlimited

	snapMu   sync.Mutex
	snap     *ckpt.Snapshot // cached donor snapshot, encoded on first request of a step
	snapHist bool           // snap carries the line history

	history     lineHistory // who made the line's last models (lineage.go)
	resumedHist []mesh.Made // the checkpoint's history, for the mesh's start
	resumedRes  []float32   // the checkpoint's error-feedback residual, for the loop's start
	resumedMom  []float32   // the checkpoint's worker momentum, for the loop's start
	pastInitial bool        // the home holds PastInitialFile (training goroutine after start)

	awaitingAdmission bool // a newcomer left out of a step, not yet in a ring (mesh goroutine)
	waitingHave       int  // members counted in the last "waiting for members" log line, 0 when not waiting (mesh goroutine)

	inflight inflight // the all-reduce attempt running now, if any
	retry    backoff  // of failed model fetches (training goroutine)

	wg sync.WaitGroup
}

// The node's parts (p2p.PartLabel) besides the host's: the training
// goroutine, the mesh goroutine (agreement), and the all-reduce attempts
// the training goroutine runs (averaging); diloco labels its hashing.
const (
	partTraining  = "training"
	partAgreement = "agreement"
	partAveraging = "averaging"
)

// New prepares a node: it validates cfg, starts the libp2p host, and builds
// the model, resuming from the newest checkpoint under cfg.Home if there is
// one. It starts no goroutine of its own; Run does.
func New(ctx context.Context, cfg Config) (*Node, error) { return newNode(ctx, cfg) }

// publisher publishes on the run's gossip topics (p2p.Host.PublishTo).
type publisher interface {
	PublishTo(ctx context.Context, topic string, data []byte) error
}

// option changes a node newNode built, before it runs: the node tests'
// attackers bring a reducer or a publisher of their own, their auditors
// audit every owner every step.
type option func(*Node)

// newNode is New with options.
func newNode(ctx context.Context, cfg Config, opts ...option) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return nil, fmt.Errorf("node: home: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With("system", "node"),
		retry:    backoff{base: fetchRetryBase, limit: fetchRetryLimit},
		meshCmds: make(chan meshCmd, 64),
		events:   make(chan diloco.Event, 16),
	}
	if cfg.MaxSendRate > 0 {
		n.sendRate = p2p.NewSendLimiter(cfg.MaxSendRate)
	}
	if err := n.loadPSK(); err != nil {
		return nil, err
	}
	if err := n.newHost(ctx); err != nil {
		return nil, err
	}
	if err := n.initRun(ctx); err != nil {
		n.host.Close()
		return nil, err
	}
	n.acct.m = account.New(account.Config{Self: n.self})
	n.reducer, n.pub = ringReducer{n}, n.host
	if cfg.Averaging == AveragingRobust {
		n.reducer = scatterReducer{n}
	}
	for _, o := range opts {
		o(n)
	}
	return n, nil
}

// newHost starts the node's libp2p host (not its gossip: Run does).
func (n *Node) newHost(ctx context.Context) error {
	cfg := n.cfg
	reg := prometheus.NewRegistry()
	h, err := p2p.New(ctx, p2p.Config{
		PSK:          n.cred.psk,
		Home:         cfg.Home,
		Listen:       cfg.Listen,
		Announce:     cfg.Announce,
		NATPortMap:   cfg.NATPortMap,
		Reachability: cfg.Reachability,
		Bootstrap:    cfg.Bootstrap,
		Rejoin:       holdsRun(cfg.Home),
		Run:          cfg.Run,
		Topics:       []string{account.Topic},
		Logger:       cfg.Logger,
		Metrics:      reg,
		Libp2p:       cfg.Libp2p,
	})
	if err != nil {
		return err
	}
	n.host = h
	n.self = mesh.PeerID(h.ID().String())
	n.met = newMetrics(reg, &n.board, h.Bandwidth)
	return nil
}

// initRun settles the run manifest, serves it to joiners and builds the
// model.
func (n *Node) initRun(ctx context.Context) error {
	if err := n.initManifest(ctx); err != nil {
		return err
	}
	// Joiners may ask for the manifest as soon as this node listens.
	var err error
	if n.mserv, err = p2p.ServeManifest(n.host.Libp2p(), n.run.raw, n.cfg.Logger); err != nil {
		return err
	}
	return n.initModel()
}

// holdsRun reports whether home holds a run manifest: the node is a member
// restarting, which starts even when no bootstrap peer answers (its network
// may be cut for a while) and redials them (p2p.Config.Rejoin).
func holdsRun(home string) bool {
	_, err := os.Stat(filepath.Join(home, ManifestFile))
	return err == nil
}

// newEngine builds a fresh engine for the configured device.
func (n *Node) newEngine(opts train.Options) (train.Engine, error) {
	if n.cfg.Device == "sim" {
		return newSimEngine(opts, n.cfg.SimStep)
	}
	return train.NewEngine(n.cfg.Device, opts, n.data)
}

// RunSeed derives the model-initialisation seed every member of run shares.
func RunSeed(run string) uint64 {
	s := sha256.Sum256([]byte("intellect-node/init/" + run))
	return binary.LittleEndian.Uint64(s[:8])
}

// workerID derives this node's data-sampler id from its peer id, so members
// draw different data.
func workerID(id peer.ID) uint64 {
	s := sha256.Sum256([]byte(id))
	return binary.LittleEndian.Uint64(s[:8])
}

// trainOptions returns the training options of a node running cfg whose
// peer id is self.
func trainOptions(cfg Config, self peer.ID) (train.Options, error) {
	opts, err := train.DefaultOptions(cfg.Preset)
	if err != nil {
		return opts, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	if cfg.ConfigFile != "" {
		c, err := train.LoadConfig(cfg.ConfigFile)
		if err != nil {
			return opts, err
		}
		opts.Model = c
		opts.Seq = min(opts.Seq, c.SeqLen)
	}
	opts.Seed = cfg.Seed
	if opts.Seed == 0 {
		opts.Seed = RunSeed(cfg.Run)
	}
	opts.Optimizer = cfg.Optimizer
	if opts.Optimizer == train.OptimizerAdamW {
		opts.Optimizer = "" // canonical: manifests before Muon say nothing
	}
	opts.Worker = workerID(self)
	if cfg.LRDecay > 0 {
		opts.DecayFrac = cfg.LRDecay
	}
	if cfg.MaxOuterSteps > 0 {
		// Let the schedule's decay end with the run.
		opts.TotalSteps = max(int(cfg.MaxOuterSteps)*cfg.InnerSteps, opts.WarmupSteps+1)
	}
	return opts, opts.Validate()
}

// initModel builds the engine from the run manifest's options, or resumes
// it from the newest checkpoint.
func (n *Node) initModel() error {
	opts := n.opts
	opts.Worker = workerID(n.host.ID())
	resumed, err := n.resume(opts)
	if err != nil {
		return err
	}
	if !resumed {
		if n.engine, err = n.newEngine(opts); err != nil {
			return err
		}
		theta0 := slices.Clone(n.engine.Params())
		n.model = diloco.NewModel(0, theta0, diloco.NewOuter(len(theta0), n.cfg.OuterLR, *n.cfg.OuterMomentum))
	}
	n.params = int64(n.model.Len())
	if n.pastInitial, err = hasPastInitial(n.cfg.Home); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.pastInitial && n.model.Step() == 0 {
		n.log.Warn("this node held a model past the run's initial one but has no checkpoint of it: "+
			"it waits for a peer past step 0 to fetch from, instead of training the initial model again",
			"file", filepath.Join(n.cfg.Home, PastInitialFile), "to start from the initial model", "delete the file")
	}
	n.log.Info("model ready", "preset", opts.Model.Name, "params", n.params, "device", n.cfg.Device,
		"data", n.data.String(), "outer_step", n.model.Step(), "hash", short(n.model.Hash()), "resumed", resumed)
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Run runs the node until ctx is cancelled or MaxOuterSteps is reached, then
// leaves the network gracefully, writes a checkpoint and returns nil.
func (n *Node) Run(ctx context.Context) error {
	defer n.host.Close()
	defer n.engine.Close()
	loopCtx, stopLoops := context.WithCancel(context.Background())
	defer stopLoops()
	if err := n.start(loopCtx); err != nil {
		return err
	}
	err := n.evalInitial()
	if err == nil {
		p2p.DoPart(ctx, partTraining, func(ctx context.Context) { err = n.trainLoop(ctx) })
	}
	if errors.Is(err, diloco.ErrDone) { // reached --max-outer-steps
		n.awaitReports(ctx)
	}
	n.leave()
	if cerr := n.saveCheckpoint(); cerr != nil {
		n.log.Error("final checkpoint", "err", cerr)
	}
	stopLoops()
	if n.api != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n.api.close(sctx)
		cancel()
	}
	n.ar.Close()
	n.sc.Close()
	n.ckpt.Close()
	n.ckptUpd.Close()
	n.mserv.Close()
	n.wg.Wait()
	if err == nil || errors.Is(err, diloco.ErrDone) || errors.Is(err, context.Canceled) {
		n.log.Info("node stopped", "outer_step", n.model.Step(), "hash", short(n.model.Hash()))
		return nil
	}
	return err
}

// evalInitial records the held-out loss of the run's initial model (outer
// step 0), the reference a run's progress is measured against.
func (n *Node) evalInitial() error {
	if n.model.Step() != 0 {
		return nil
	}
	eval, err := n.engine.Eval()
	if err != nil {
		return fmt.Errorf("node: eval: %w", err)
	}
	rec := OuterRecord{Step: 0, Time: time.Now(), EvalLoss: eval, ModelHash: n.model.Hash()}
	n.board.record(rec)
	n.board.update(func(s *Status) { s.EvalLoss = eval })
	n.keepHistory(rec)
	n.log.Info("initial model", "eval_loss", fmt.Sprintf("%.4f", eval), "hash", short(n.model.Hash()))
	return nil
}

// start brings up the API, the stream protocols, the host's discovery and
// gossip, and the mesh goroutine.
func (n *Node) start(ctx context.Context) error {
	n.life = ctx
	if err := n.startServices(); err != nil {
		return err
	}
	n.setValidators()
	if err := n.host.Start(ctx); err != nil {
		return err
	}
	m, err := mesh.New(mesh.Config{
		ID: n.self, Addrs: n.host.Addrs(), MinMembers: n.cfg.MinMembers,
		Inner: n.cfg.InnerSteps, CloseFraction: *n.cfg.CloseFraction,
		AllDirect: n.cfg.Averaging == AveragingRobust, // the direct scatter sends member to member
		Seed:      int64(workerID(n.host.ID())),
		// A restarted node's old votes and Ready are dropped by its peers.
		Incarnation: uint64(time.Now().UnixNano()),
		AdmitRate:   n.run.admitRate(),
		History:     n.resumedHist,
		PastInitial: n.pastInitial,
	}, n.model.Step(), n.model.Hash())
	if err != nil {
		return err
	}
	n.board.update(func(s *Status) {
		s.PeerID, s.Addrs, s.Run, s.Device = string(n.self), n.host.Addrs(), n.cfg.Run, n.cfg.Device
		s.Manifest = n.run.id
		s.Preset, s.Params, s.InnerSteps, s.OuterStep = n.cfg.Preset, n.params, n.cfg.InnerSteps, n.model.Step()
		s.ModelHash, s.StartedAt, s.State = n.model.Hash(), time.Now(), "starting"
	})
	if err := n.startAPI(); err != nil {
		return err
	}
	n.log.Info("node started", "peer", n.self, "addrs", n.host.Addrs(), "run", n.cfg.Run, "manifest", short(n.run.id))
	n.wg.Go(func() { p2p.DoPart(ctx, partAgreement, func(ctx context.Context) { n.meshLoop(ctx, m) }) })
	return nil
}

// startServices registers the all-reduce, scatter and checkpoint stream
// protocols.
func (n *Node) startServices() error {
	var err error
	if n.ar, err = ring.NewService(n.host.Libp2p(), ring.ServiceConfig{
		IOTimeout: n.cfg.AllReduceTimeout, Run: n.run.key, Logger: n.cfg.Logger}); err != nil {
		return err
	}
	if n.sc, err = scatter.NewService(n.host.Libp2p(), scatter.Config{
		IOTimeout: n.cfg.AllReduceTimeout, Run: n.run.key, Logger: n.cfg.Logger}); err != nil {
		return err
	}
	if n.ckpt, err = ckpt.Serve(n.host.Libp2p(), n.snapshot, ckpt.ServeConfig{
		Rate: n.cfg.DonorRate, Run: n.run.key, Logger: n.cfg.Logger}); err != nil {
		return err
	}
	n.ckptUpd, err = ckpt.Serve(n.host.Libp2p(), n.updateSnapshot, ckpt.ServeConfig{
		Rate: n.cfg.DonorRate, Run: n.run.key, Logger: n.cfg.Logger, Update: true})
	return err
}

// setValidators vets the gossip topics' messages: mesh messages signed by
// their From (one or a bundle), verdict reports that decode.
func (n *Node) setValidators() {
	n.host.SetValidator(func(from peer.ID, data []byte) bool {
		_, err := meshSigned(from, data)
		return err == nil
	})
	// The host was made with account.Topic: no error.
	_ = n.host.SetTopicValidator(account.Topic, func(_ peer.ID, data []byte) bool {
		_, err := account.Decode(data)
		return err == nil
	})
}

// startAPI serves the REST API, unless it is off, and writes its address
// to <home>/api.addr.
func (n *Node) startAPI() error {
	if n.cfg.StatusAddr == "off" {
		return nil
	}
	var err error
	if n.api, err = newAPI(n.cfg.StatusAddr, &n.board, n.met.handler(), n.cfg.StatusToken, n.cfg.Pprof, n.log); err != nil {
		return err
	}
	addrFile := filepath.Join(n.cfg.Home, "api.addr")
	if err := os.WriteFile(addrFile, []byte(n.api.Addr()+"\n"), 0o600); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.wg.Go(func() {
		if err := n.api.serve(); err != nil {
			n.log.Error("status API", "err", err)
		}
	})
	n.log.Info("status API", "url", "http://"+n.api.Addr()+"/")
	return nil
}

// snapshot returns what donors serve: θ₀ and v of the current step. It is
// encoded on the first request of each step and cached: most steps have no
// joiner, and encoding copies and hashes 8 bytes per parameter (≈ 185 ms for
// the small preset, more than half of the loop's own work per outer step).
// Called concurrently by the donor's streams.
func (n *Node) snapshot() *ckpt.Snapshot {
	n.snapMu.Lock()
	defer n.snapMu.Unlock()
	n.model.Read(func(step uint64, hash string, theta0, v []float32) {
		hist, histOK := n.history.of(step, hash)
		if n.snap == nil || n.snap.Step != step || n.snap.Hash != hash || histOK && !n.snapHist {
			state, _ := json.Marshal(snapshotState{Run: n.cfg.Run, Manifest: n.runID(), Step: step, Params: n.params, History: hist})
			n.snap = ckpt.EncodeSnapshot(step, theta0, v, state)
			n.snapHist = histOK
		}
	})
	return n.snap
}

// leave announces a graceful leave and waits (briefly) until it is published.
func (n *Node) leave() {
	done := make(chan struct{})
	select {
	case n.meshCmds <- meshCmd{kind: cmdLeave, done: done}:
	case <-time.After(time.Second):
		return
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}
