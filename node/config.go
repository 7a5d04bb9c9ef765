// Package node is the composition root of intellect-node: it reads the
// configuration, starts the libp2p host, drives the pure mesh state machine
// with timers and gossip, runs the DiLoCo training loop (H inner steps of the
// inner optimizer, a compressed average of the pseudo-gradients — robust
// direct scatter by default, the ring's mean with --averaging mean — and the
// outer Nesterov step, each codec with its operating point), serves the
// local REST status API and web page, and keeps checkpoints. It is the only
// package that owns long-lived goroutines.
package node

import (
	"errors"
	"fmt"
	"github.com/intellect-node/intellect-node/train"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p"
)

// Config is everything a node needs. Zero values are filled by Validate.
type Config struct {
	// Home is the directory holding the identity key and checkpoints.
	// Default DefaultHome under the user's home directory.
	Home string
	// Listen are libp2p listen multiaddrs. Default DefaultListen.
	Listen []string
	// Announce, if set, replaces the addresses this node advertises (a known
	// public address, e.g. a port forward); it makes the node public.
	Announce []string
	// NATPortMap asks the home router for a port mapping (UPnP / NAT-PMP).
	NATPortMap bool
	// Reachability is p2p.ReachAuto (default), ReachPublic or ReachPrivate
	// (docs/nat.md).
	Reachability string
	// Bootstrap are multiaddrs (with /p2p/) of any running members. None
	// starts a new network.
	Bootstrap []string
	// Run names the training run; nodes of different runs ignore each other.
	// Default DefaultRun.
	Run string
	// Preset names the model preset (train.PresetNames). Default
	// DefaultPreset.
	// ConfigFile, if set, is a JSON model config that overrides Preset.
	Preset     string
	ConfigFile string
	// Data is a token shard file, directory or mixture spec; empty uses the
	// embedded generated corpus.
	Data string
	// Device is "cpu" (DefaultDevice), "cuda" (only in binaries built with -tags
	// cuda), or "sim": inner steps replaced by a sleep of SimStep over a
	// parameter vector of the preset's size (for WAN benchmarks of many nodes).
	Device string
	// SimStep is the duration of one inner step of the sim device.
	SimStep time.Duration
	// Overlap runs the all-reduce of outer step t in the background during
	// the inner steps of t+1 and applies the averaged update one step late.
	Overlap bool
	// OverlapSteps, with Overlap, is after how many inner steps of a phase
	// the previous phase's average is applied (1..InnerSteps; the node waits
	// there if it has not arrived). 0 applies it after the first inner step
	// at which it has arrived: as early as the network allows, so quality
	// stays near blocking on fast links and the all-reduce is still hidden
	// on slow ones (members then make different but equally valid choices;
	// the global models stay identical). Fixed values make seeded runs
	// reproducible.
	OverlapSteps int
	// StatusAddr is where the REST API listens. Default DefaultStatusAddr;
	// "off" disables it.
	StatusAddr string
	// StatusToken, if set, is a secret that opens the REST API (read-only)
	// to requests from elsewhere that carry "Authorization: Bearer
	// <token>"; the loopback Host/Origin checks then give way to it. An
	// address that is not loopback needs one. At least 16 bytes.
	StatusToken string
	// Pprof also serves Go's runtime profiles at /debug/pprof/ on the
	// REST API (same access rules): what an operator reads a leak or a
	// hot loop with (`go tool pprof http://127.0.0.1:8642/debug/pprof/heap`).
	Pprof bool
	// InnerSteps is H, the inner optimizer's steps between outer steps.
	// Default the codec's (CodecPoint); larger H sends proportionally fewer
	// bytes per token and converges worse (docs/traffic.md).
	InnerSteps int
	// MinMembers holds the run's first outer step until this many members
	// agree on a ring. A creator records it in the run manifest; a member
	// holds the first ring to the larger of the run's and its own (a lower
	// own value is ignored). Default DefaultMinMembers, at most
	// mesh.MaxMembers.
	MinMembers int
	// CloseFraction is the close rule's work target (mesh.Config.
	// CloseFraction, docs/mesh.md "The close rule"): an outer step closes
	// once its Ready members' inner steps, each counted up to H, sum to
	// this fraction of the members × H, and members still training end
	// their phase and contribute the inner steps they finished. 0: every
	// step waits for every member (up to the straggler timeout). nil means
	// DefaultCloseFraction. A creator records it in the run manifest.
	CloseFraction *float64
	// MaxOuterSteps, if > 0, makes the node leave gracefully after completing
	// that outer step.
	MaxOuterSteps uint64
	// OuterLR is the outer optimizer's learning rate (> 0; default the
	// codec's, CodecPoint). Every member of a run must use the same.
	OuterLR float32
	// OuterMomentum is the outer optimizer's Nesterov momentum μ in [0, 1);
	// nil means the codec's (CodecPoint). 0 is plain SGD on the averaged
	// pseudo-gradient. Every member of a run must use the same.
	OuterMomentum *float32
	// WorkerMomentum μ in [0, 1) has each member keep Nesterov momentum of
	// its own pseudo-gradients and send Δ + μ·v (diloco.Config.WorkerMomentum);
	// with OuterMomentum 0 it is the same outer step, and the robust
	// owners compare members' momenta, in which an attack that hides in the
	// honest spread stands out more (docs/robust.md). nil means the
	// codec's (CodecPoint). Every member of a run must use the same.
	WorkerMomentum *float32
	// Shards is the number of parallel rings (streams per neighbour) of the
	// all-reduce. Default DefaultShards; 1..collective.MaxShards. Every member of
	// a run must use the same.
	Shards int
	// Codec is how pseudo-gradients travel (codec.go): CodecInt8, CodecQ4,
	// CodecQ2, CodecTopK or CodecFP32 (the plain ring mean, for
	// comparisons). Default DefaultCodec. Every member of a run must use the
	// same (the run manifest holds it).
	Codec string
	// FP32 is Codec CodecFP32 (the --fp32 flag).
	FP32 bool
	// TopK and TopKBits are codec topk's entries per 4096-value block and
	// bits per kept value (0: DefaultTopK, collective.DefaultTopKBits).
	TopK, TopKBits int
	// FeedbackDecay is β of the compressed codecs' error feedback: each
	// member sends the compressed e = β·e + Δ and keeps what was not sent
	// in e. (0, 1]; 0 takes DefaultFeedbackDecay.
	FeedbackDecay float32
	// ResultFeedback, with a compressed codec and robust averaging, has
	// each segment owner add what encoding its result lost to its own
	// error-feedback buffer (int8's owners always do, with ErrorFeedback).
	ResultFeedback bool
	// ErrorFeedback carries each node's quantization residual into its
	// next pseudo-gradient; always on with the compressed codecs.
	ErrorFeedback bool
	// Averaging is how members average pseudo-gradients: AveragingRobust
	// (direct scatter; each segment owner clips and combines every
	// contribution robustly, docs/robust.md) or AveragingMean (the ring's
	// weighted mean). Default DefaultAveraging. Every member of a run must
	// use the same.
	Averaging string
	// Optimizer is the inner optimizer: train.OptimizerAdamW or
	// train.OptimizerMuon (docs/convergence.md). Default DefaultOptimizer.
	// Recorded in the run manifest (train.optimizer; AdamW as "").
	Optimizer string
	// LRDecay is the fraction of the schedule's steps over which the inner
	// learning rate decays linearly to its minimum (train.Options.DecayFrac;
	// the schedule ends at --max-outer-steps × H, else the preset's
	// TotalSteps). 0: the codec's (CodecPoint), whose 0 is the preset's.
	// Recorded in the run manifest (train.decay_frac).
	LRDecay float64
	// Tick is the period of the mesh state machine's clock. Default
	// DefaultTick.
	Tick time.Duration
	// AllReduceTimeout bounds one all-reduce attempt. Default
	// DefaultAllReduceTimeout.
	AllReduceTimeout time.Duration
	// CheckpointEvery writes a durable checkpoint every so many outer steps;
	// negative: only at exit. 0 takes DefaultCheckpointEvery. KeepCheckpoints is
	// how many to keep (DefaultKeepCheckpoints).
	CheckpointEvery int
	KeepCheckpoints int
	// RingOrder is how ring members are ordered: "latency" (DefaultRingOrder) puts in
	// each vote the measured round-trip times to the other members, and all
	// members order the ring to maximise its slowest link; "sorted" orders
	// by peer id.
	RingOrder string
	// MaxSendRate caps the all-reduce's send rate in bytes per second (0:
	// unlimited), for links shared with other traffic.
	MaxSendRate float64
	// DonorRate caps the bytes per second this node serves to joiners
	// fetching the model (0: the p2p default; negative: unlimited).
	DonorRate int64
	// Seed seeds the model initialisation; it must be the same on every
	// member of a run. Default: derived from Run.
	Seed uint64
	// Tokenizer names the data's tokenizer in the run manifest. Default
	// DefaultTokenizer.
	Tokenizer string
	// ManifestID, if set, pins the run manifest (its 64-hex-digit id): a
	// joiner refuses a manifest from its bootstrap peers with another id,
	// a restart one in Home. Empty: trust the first bootstrap peer.
	ManifestID string
	// Admission is the admission policy a creator writes into a new run's
	// manifest: AdmissionOpen (default), AdmissionPSK or AdmissionAllowlist
	// (docs/manifest.md "Admission"). A joiner takes the manifest's; if
	// Given names it, they must agree.
	Admission string
	// PSKFile is the private network key of a psk run, in the swarm.key
	// format (EncodePSK). Empty: <Home>/swarm.key if it exists; a creator
	// with Admission psk and no key gets one written there.
	PSKFile string
	// TicketFile holds this node's admission ticket to an allowlist run
	// (the text of IssueTicket, as `intellect-node admit` prints it).
	// Empty: <Home>/admission.ticket if it exists. The creator needs none.
	TicketFile string
	// skipTicketCheck (tests only) joins an allowlist run with a ticket
	// that does not pass this node's own check, or none: an intruder.
	skipTicketCheck bool
	// Given lists the run settings the operator set explicitly, by manifest
	// field path ("inner_steps", "preset", "train.model", "data",
	// "compression.codec", …) → the setting as typed ("--inner-steps 10").
	// Each must agree with the run manifest the node runs under, else New
	// fails naming the fields; the other settings of this Config that the
	// manifest holds are replaced by the manifest's (a joiner needs none).
	Given map[string]string
	// OnProgress, if set, is told the progress of long work (a model fetch,
	// a checkpoint write) as it goes, for a progress bar; the node logs
	// fetches anyway. Calls come from one goroutine at a time and must not
	// block.
	OnProgress func(Progress)
	// Logger receives the node's logs. Default slog.Default().
	Logger *slog.Logger
	// Libp2p, if set, builds the node's libp2p host (p2p.Config.Libp2p):
	// the scale lab's in-memory network of many nodes in one process.
	Libp2p p2p.Libp2pFunc
}

// DefaultOverlap is the --overlap flag's default: the all-reduce runs behind
// the next phase's inner steps. It costs +0.59 % in loss with Muon at H = 5
// (under the 1 % a hidden all-reduce is worth) and lets the close rule keep
// fast members busy while a slow one finishes (docs/convergence.md). Config's
// zero value stays blocking, which is what seeded references reproduce.
const DefaultOverlap = true

// Defaults of the rest of Config. Each is defined once: where the package
// that owns the mechanism defines it (mesh: shards, tick, min members; p2p:
// run name), node names that constant; the rest are node's own. The flags of
// cmd/intellect-node take their defaults from these.
const (
	// DefaultHome is the node's directory under the user's home.
	DefaultHome = ".intellect-node"
	// DefaultPort is the TCP port of DefaultListen, as the README documents.
	DefaultPort       = p2p.DefaultPort
	DefaultRun        = p2p.DefaultRun
	DefaultPreset     = "tiny"
	DefaultDevice     = "cpu"
	DefaultStatusAddr = "127.0.0.1:8642"
	DefaultMinMembers = mesh.DefaultMinMembers
	// DefaultCloseFraction: a step closes once half the members' whole
	// phases are done, so a minority cannot close it by itself.
	DefaultCloseFraction = 0.5
	// DefaultShards moves the int8 quantization blocks (collective.DefaultShards).
	DefaultShards    = collective.DefaultShards
	DefaultRingOrder = "latency"
	// AveragingMean and AveragingRobust are the values of Config.Averaging.
	AveragingMean    = "mean"
	AveragingRobust  = "robust"
	DefaultAveraging = AveragingRobust
	// DefaultCodec, DefaultTopK and DefaultFeedbackDecay: the codec's
	// defaults (docs/convergence.md "Traffic").
	DefaultCodec            = CodecQ2
	DefaultTopK             = collective.DefaultTopK
	DefaultFeedbackDecay    = 1
	DefaultOptimizer        = train.OptimizerMuon
	DefaultTick             = mesh.DefaultTickMillis * time.Millisecond
	DefaultAllReduceTimeout = 60 * time.Second
	DefaultCheckpointEvery  = 10
	DefaultKeepCheckpoints  = 3
)

// DefaultListen returns the listen addresses used when Config.Listen is
// empty: p2p.DefaultListen, TCP and QUIC v1 (QUIC not with a private
// network's PSK) on DefaultPort of every IPv4 and IPv6 interface. The node
// starts if at least one of them can be bound.
func DefaultListen() []string { return append([]string(nil), p2p.DefaultListen...) }

// Progress is the state of a long piece of work.
type Progress struct {
	Work        string // what: "fetch" (the live model from peers) or "checkpoint"
	Done, Total int64  // bytes
	Detail      string // e.g. "step 42 from 3 donors"
}

// minStatusToken is the shortest status API token accepted.
const minStatusToken = 16

// ErrBadConfig is wrapped by every configuration error.
var ErrBadConfig = errors.New("node: bad config")

// Validate fills defaults and rejects bad values.
func (c *Config) Validate() error {
	if err := c.fillDefaults(); err != nil {
		return err
	}
	if err := c.checkStatus(); err != nil {
		return err
	}
	return c.check()
}

// ResolveHome returns home, or DefaultHome under the user's home directory
// when it is empty.
func ResolveHome(home string) (string, error) {
	if home != "" {
		return home, nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: no --home and no user home: %v", ErrBadConfig, err)
	}
	return filepath.Join(h, DefaultHome), nil
}

// fillDefaults sets the zero fields to their defaults.
func (c *Config) fillDefaults() error {
	home, err := ResolveHome(c.Home)
	if err != nil {
		return err
	}
	c.Home = home
	if len(c.Listen) == 0 {
		c.Listen = DefaultListen()
	}
	defString(&c.Run, DefaultRun)
	defString(&c.Preset, DefaultPreset)
	defString(&c.Device, DefaultDevice)
	defString(&c.StatusAddr, DefaultStatusAddr)
	defString(&c.RingOrder, DefaultRingOrder)
	defString(&c.Reachability, p2p.ReachAuto)
	if c.FP32 || c.Codec == CodecFP32 {
		defString(&c.Averaging, AveragingMean) // robust averaging does not send fp32
	}
	defString(&c.Averaging, DefaultAveraging)
	if err := c.resolveCodec(); err != nil {
		return err
	}
	defString(&c.Optimizer, DefaultOptimizer)
	defString(&c.Tokenizer, DefaultTokenizer)
	defString(&c.Admission, AdmissionOpen)
	c.fillPoint(CodecPoint(c.Codec))
	defInt(&c.MinMembers, DefaultMinMembers)
	defInt(&c.Shards, DefaultShards)
	defInt(&c.CheckpointEvery, DefaultCheckpointEvery)
	defInt(&c.KeepCheckpoints, DefaultKeepCheckpoints)
	if c.CloseFraction == nil {
		c.CloseFraction = new(float64(DefaultCloseFraction))
	}
	defDuration(&c.Tick, DefaultTick)
	defDuration(&c.AllReduceTimeout, DefaultAllReduceTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// fillPoint sets the DiLoCo settings left zero (nil) to p's.
func (c *Config) fillPoint(p Point) {
	defInt(&c.InnerSteps, p.InnerSteps)
	if c.OuterLR == 0 {
		c.OuterLR = p.OuterLR
	}
	if c.OuterMomentum == nil {
		c.OuterMomentum = new(p.OuterMomentum)
	}
	if c.WorkerMomentum == nil {
		c.WorkerMomentum = new(p.WorkerMomentum)
	}
	if c.LRDecay == 0 {
		c.LRDecay = p.LRDecay
	}
}

// checkStatus rejects a status API reachable from elsewhere without a
// token, and a short token.
func (c *Config) checkStatus() error {
	if c.StatusAddr != "off" {
		host, _, err := net.SplitHostPort(c.StatusAddr)
		if err != nil {
			return fmt.Errorf("%w: --status %q: %v", ErrBadConfig, c.StatusAddr, err)
		}
		if c.StatusToken == "" && !isLocalHost(host) {
			return fmt.Errorf("%w: --status %s is reachable from other machines: give --status-token-file, or listen on 127.0.0.1", ErrBadConfig, c.StatusAddr)
		}
	}
	if c.StatusToken != "" && len(c.StatusToken) < minStatusToken {
		return fmt.Errorf("%w: status token of %d bytes, want at least %d", ErrBadConfig, len(c.StatusToken), minStatusToken)
	}
	return nil
}

// check rejects out-of-range values of a filled Config.
func (c *Config) check() error {
	switch {
	case c.OverlapSteps < 0 || c.OverlapSteps > c.InnerSteps:
		return fmt.Errorf("%w: --overlap-steps %d: want 0..--inner-steps (%d)", ErrBadConfig, c.OverlapSteps, c.InnerSteps)
	case c.InnerSteps < 1:
		return fmt.Errorf("%w: --inner-steps must be ≥ 1, got %d", ErrBadConfig, c.InnerSteps)
	case !(*c.CloseFraction >= 0 && *c.CloseFraction <= 1):
		return fmt.Errorf("%w: --close-fraction %v: want [0, 1]", ErrBadConfig, *c.CloseFraction)
	case c.MinMembers < 1 || c.MinMembers > mesh.MaxMembers:
		return fmt.Errorf("%w: --min-members must be in 1..%d, got %d", ErrBadConfig, mesh.MaxMembers, c.MinMembers)
	case !(c.LRDecay >= 0 && c.LRDecay <= 1):
		return fmt.Errorf("%w: --lr-decay %v: want [0, 1]", ErrBadConfig, c.LRDecay)
	case c.Optimizer != "" && c.Optimizer != train.OptimizerAdamW && c.Optimizer != train.OptimizerMuon:
		return fmt.Errorf("%w: --optimizer %q: want %s or %s", ErrBadConfig, c.Optimizer, train.OptimizerAdamW, train.OptimizerMuon)
	case c.Shards < 1 || c.Shards > collective.MaxShards:
		return fmt.Errorf("%w: shards must be in 1..%d, got %d", ErrBadConfig, collective.MaxShards, c.Shards)
	case !(c.OuterLR > 0 && c.OuterLR <= 10) || !(*c.OuterMomentum >= 0 && *c.OuterMomentum < 1):
		return fmt.Errorf("%w: outer lr %v (want (0, 10]), momentum %v (want [0, 1))", ErrBadConfig, c.OuterLR, *c.OuterMomentum)
	case !(*c.WorkerMomentum >= 0 && *c.WorkerMomentum < 1):
		return fmt.Errorf("%w: worker momentum %v: want [0, 1)", ErrBadConfig, *c.WorkerMomentum)
	case c.Tick < time.Millisecond:
		return fmt.Errorf("%w: tick %v too short", ErrBadConfig, c.Tick)
	case c.Device == "sim" && c.SimStep <= 0:
		return fmt.Errorf("%w: --device sim needs --sim-step > 0", ErrBadConfig)
	case c.RingOrder != "latency" && c.RingOrder != "sorted":
		return fmt.Errorf("%w: --ring-order %q: want latency or sorted", ErrBadConfig, c.RingOrder)
	case c.Averaging != AveragingMean && c.Averaging != AveragingRobust:
		return fmt.Errorf("%w: --averaging %q: want mean or robust", ErrBadConfig, c.Averaging)
	case c.Averaging == AveragingRobust && c.Codec == CodecFP32:
		return fmt.Errorf("%w: --averaging robust does not send fp32: it does not take --fp32", ErrBadConfig)
	case c.Reachability != p2p.ReachAuto && c.Reachability != p2p.ReachPublic && c.Reachability != p2p.ReachPrivate:
		return fmt.Errorf("%w: --reachability %q: want auto, public or private", ErrBadConfig, c.Reachability)
	case c.MaxSendRate < 0:
		return fmt.Errorf("%w: max send rate %v", ErrBadConfig, c.MaxSendRate)
	case c.ManifestID != "" && !isHex(c.ManifestID, 64):
		return fmt.Errorf("%w: --manifest %q: want the 64 hex digits of a run manifest id", ErrBadConfig, c.ManifestID)
	case c.Admission != AdmissionOpen && c.Admission != AdmissionPSK && c.Admission != AdmissionAllowlist:
		return fmt.Errorf("%w: --admission %q: want open, psk or allowlist", ErrBadConfig, c.Admission)
	case c.KeepCheckpoints < 1:
		return fmt.Errorf("%w: checkpoint every %d keep %d", ErrBadConfig, c.CheckpointEvery, c.KeepCheckpoints)
	}
	return nil
}

func defString(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func defDuration(p *time.Duration, v time.Duration) {
	if *p == 0 {
		*p = v
	}
}

func defInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}
