package mesh

import (
	"errors"
	"fmt"
)

// ErrConfig is wrapped by every error of Config.Validate.
var ErrConfig = errors.New("mesh: bad config")

// Config configures a Mesh. Durations are in ticks: node calls Tick at a fixed
// interval (DefaultTickMillis ms is the intended one). Zero fields take the
// defaults below; Validate fills them in.
type Config struct {
	// ID is this node's peer id. Required, at most MaxPeerIDLen bytes.
	ID PeerID
	// Addrs are this node's listen multiaddrs, gossiped in heartbeats and
	// joins. At most MaxAddrs of at most MaxAddrLen bytes.
	Addrs []string
	// AllDirect asks for rings fit for the direct scatter of robust
	// averaging: at least one member reaches every other directly; those
	// that do own segments, the others are clients (Ring.Owners). False: a
	// cycle of direct links suffices (the ring all-reduce).
	AllDirect bool
	// HeartbeatTicks is the interval between heartbeats (and between
	// re-broadcasts of the current vote). Default 5.
	HeartbeatTicks int
	// DeadTicks: a peer not heard from for this many ticks is dead. Default
	// 30; must exceed 2·HeartbeatTicks.
	DeadTicks int
	// StragglerTicks is how long a Ready node waits for peers that are alive
	// and in the same step but not yet Ready before it votes without them,
	// or, under the close rule (CloseFraction), before it closes the step.
	// Default 100.
	StragglerTicks int
	// Inner is H, the inner steps of a whole phase: the unit of the close
	// rule's work target. Required (≥ 1) when CloseFraction is set.
	Inner int
	// CloseFraction turns on the close rule (close.go): the step closes
	// once the inner steps of its Ready members, each counted up to
	// Inner, sum to CloseFraction · n · Inner, n being the members of the
	// step (Ready or still training), or StragglerTicks after this node's
	// own Ready; members still training then end their phase and are
	// Ready with the inner steps they finished (Ready.Close). 0: no close
	// rule, a Ready node waits for every member up to StragglerTicks. In
	// [0, 1].
	CloseFraction float64
	// CloseWaitTicks: once the step closed, how long a Ready node waits
	// for the members still training to be Ready before it votes without
	// them. Default 30.
	CloseWaitTicks int
	// ProposeTimeoutTicks: a round undecided after this many ticks excludes,
	// for this step, the members that did not vote for it, and moves on.
	// Default 100.
	ProposeTimeoutTicks int
	// SyncTimeoutTicks: a Fetch or Adopt not followed by Synced within this
	// many ticks is given up and chosen again. Default 600.
	SyncTimeoutTicks int
	// MinMembers: the first outer step this node takes part in (before any
	// all-reduce completed or model fetched) waits until at least this many
	// members, itself included, are Ready. Default DefaultMinMembers, at
	// most MaxMembers.
	MinMembers int
	// Seed seeds the RNG (heartbeat phase, donor order). Same seed, same
	// inputs: same outputs.
	Seed int64
	// AdmitRate limits newcomers — peers that made none of the line's last
	// MadeWindow models — to max(1, ⌊AdmitRate · established members⌋)
	// per step, so that peers made up by the thousand join a run a few at
	// a time, not as its majority at once; their accusations are void and
	// they do not count towards the fault bound until they made a step.
	// 0 admits everyone (a private run). At most 1.
	AdmitRate float64
	// History is the membership history of the model passed to New (a
	// checkpoint's Mesh.History); nil if unknown.
	History []Made
	// PastInitial says this node held a model past the run's initial one
	// (outer step 0) before it started, and has no checkpoint of it (its
	// home says so): passed step 0, it does not train the initial model
	// again — no ring of step 0, no fetch of it — but waits, joining, for a
	// peer past step 0 to fetch from. Else nodes restarted without a
	// checkpoint, seeing only each other, trained a line of their own from
	// step 0 that members left alone later adopted.
	PastInitial bool
	// Incarnation must grow each time this peer id restarts (node uses the
	// process start time in ns). Peers then drop what they knew of the
	// previous run — its votes and its Ready for the current step — and
	// ignore its late messages. 0 disables restart detection.
	Incarnation uint64
}

// Defaults of Config, in ticks.
const (
	DefaultTickMillis          = 100
	DefaultHeartbeatTicks      = 5
	DefaultDeadTicks           = 30
	DefaultStragglerTicks      = 100
	DefaultProposeTimeoutTicks = 100
	DefaultSyncTimeoutTicks    = 600
	DefaultCloseWaitTicks      = 30
	// DefaultMinMembers is not in ticks: a node alone may start.
	DefaultMinMembers = 1
)

// Validate fills defaults into zero fields and rejects bad values.
func (c *Config) Validate() error {
	if c.ID == "" || len(c.ID) > MaxPeerIDLen {
		return fmt.Errorf("%w: ID must be 1..%d bytes", ErrConfig, MaxPeerIDLen)
	}
	if len(c.Addrs) > MaxAddrs {
		return fmt.Errorf("%w: %d addrs > %d", ErrConfig, len(c.Addrs), MaxAddrs)
	}
	for _, a := range c.Addrs {
		if len(a) > MaxAddrLen {
			return fmt.Errorf("%w: addr of %d bytes > %d", ErrConfig, len(a), MaxAddrLen)
		}
	}
	fields := []struct {
		name string
		v    *int
		def  int
	}{
		{"HeartbeatTicks", &c.HeartbeatTicks, DefaultHeartbeatTicks},
		{"DeadTicks", &c.DeadTicks, DefaultDeadTicks},
		{"StragglerTicks", &c.StragglerTicks, DefaultStragglerTicks},
		{"ProposeTimeoutTicks", &c.ProposeTimeoutTicks, DefaultProposeTimeoutTicks},
		{"SyncTimeoutTicks", &c.SyncTimeoutTicks, DefaultSyncTimeoutTicks},
		{"CloseWaitTicks", &c.CloseWaitTicks, DefaultCloseWaitTicks},
		{"Inner", &c.Inner, 0},
		{"MinMembers", &c.MinMembers, DefaultMinMembers},
	}
	for _, f := range fields {
		if *f.v < 0 {
			return fmt.Errorf("%w: %s = %d < 0", ErrConfig, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.DeadTicks <= 2*c.HeartbeatTicks {
		return fmt.Errorf("%w: DeadTicks %d must exceed 2·HeartbeatTicks %d", ErrConfig, c.DeadTicks, c.HeartbeatTicks)
	}
	if !(c.AdmitRate >= 0 && c.AdmitRate <= 1) {
		return fmt.Errorf("%w: AdmitRate %g not in [0, 1]", ErrConfig, c.AdmitRate)
	}
	if !(c.CloseFraction >= 0 && c.CloseFraction <= 1) || c.CloseFraction > 0 && c.Inner < 1 || c.Inner > MaxInnerSteps {
		return fmt.Errorf("%w: CloseFraction %g with Inner %d: want a fraction in [0, 1] of 1..%d inner steps", ErrConfig, c.CloseFraction, c.Inner, MaxInnerSteps)
	}
	if c.MinMembers > MaxMembers {
		return fmt.Errorf("%w: MinMembers %d > %d", ErrConfig, c.MinMembers, MaxMembers)
	}
	return nil
}
