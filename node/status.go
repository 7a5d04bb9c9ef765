package node

import (
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/p2p"
)

// Status is the node's state as served by GET /v1/status.
type Status struct {
	PeerID             string    `json:"peer_id"`
	Addrs              []string  `json:"addrs"`
	Run                string    `json:"run"`
	Manifest           string    `json:"manifest"` // the run manifest's id
	State              string    `json:"state"`
	Device             string    `json:"device"`
	Preset             string    `json:"preset"`
	Params             int64     `json:"params"`
	OuterStep          uint64    `json:"outer_step"`
	InnerStep          int       `json:"inner_step"`
	InnerSteps         int       `json:"inner_steps"`
	Members            []string  `json:"members"`
	Loss               float64   `json:"loss"`
	EvalLoss           float64   `json:"eval_loss"`
	ModelHash          string    `json:"model_hash"`
	TokensPerSec       float64   `json:"tokens_per_sec"`
	ComputeUtilization float64   `json:"compute_utilization"`
	BytesSent          int64     `json:"bytes_sent"`
	BytesReceived      int64     `json:"bytes_received"`
	LastAllReduceSec   float64   `json:"last_allreduce_sec"`
	Download           *Download `json:"download,omitempty"`
	// Reachability says how others reach this node: public or private
	// (behind a NAT), its public and relay addresses, hole punches so far.
	Reachability p2p.Reachability `json:"reachability"`
	// Excluded lists the peers this node excluded from the run, with the
	// evidence (robust averaging: flagged again and again, a weight over H).
	Excluded []p2p.Excluded `json:"excluded,omitempty"`
	// Newcomer: this node made none of the run's last steps (mesh.MadeWindow)
	// and the run admits newcomers a few per step: it waits for its turn.
	Newcomer bool `json:"newcomer,omitempty"`
	// Waiting, when set: this node holds the run's first ring until
	// Members members are Ready, and has Have of them.
	Waiting *Waiting `json:"waiting,omitempty"`
	// Contribution is what the segment owners of the last step reported
	// of this node's contribution (robust averaging: norm, clip, flags).
	Contribution *ContributionReport `json:"contribution,omitempty"`
	// TokensBySource counts the training tokens this node drew from each
	// source of its data (mixture component) since it started.
	TokensBySource map[string]int64 `json:"tokens_by_source,omitempty"`
	StartedAt      time.Time        `json:"started_at"`
	UptimeSec      float64          `json:"uptime_sec"`
}

// Waiting is what a node held to the run's minimum waits for: "waiting
// for Members, have Have".
type Waiting struct {
	Members int `json:"members"`
	Have    int `json:"have"`
}

// Download is the progress of the model fetch from peers that is running
// (joining, adopting, or one step behind); Status.Download is nil when none
// runs.
type Download struct {
	Step       uint64 `json:"step"`
	BytesDone  int64  `json:"bytes_done"`
	BytesTotal int64  `json:"bytes_total"`
	Donors     int    `json:"donors"`
	Retries    int    `json:"retries"`
}

// PeerStatus is one entry of GET /v1/peers.
type PeerStatus struct {
	ID        string    `json:"id"`
	Addrs     []string  `json:"addrs"`
	State     string    `json:"state"`
	OuterStep uint64    `json:"outer_step"`
	ModelHash string    `json:"model_hash"`
	LastSeen  time.Time `json:"last_seen"`
	LatencyMs float64   `json:"latency_ms"`
	Connected bool      `json:"connected"`
	// Transport of the connection in use ("tcp", "quic-v1", …) and whether
	// it goes through a relay rather than directly.
	Transport string `json:"transport,omitempty"`
	Relayed   bool   `json:"relayed"`
	// Punch is the last hole punch with this peer (either side started it).
	Punch *p2p.Punch `json:"punch,omitempty"`
}

// OuterRecord is one completed outer step, as kept for GET /v1/history and
// the web page's plots.
type OuterRecord struct {
	Step          uint64    `json:"step"`
	Time          time.Time `json:"time"`
	Members       int       `json:"members"`
	Loss          float64   `json:"loss"`
	EvalLoss      float64   `json:"eval_loss"`
	AllReduceSec  float64   `json:"allreduce_sec"`
	ComputeSec    float64   `json:"compute_sec"`
	WallSec       float64   `json:"wall_sec"`
	Utilization   float64   `json:"utilization"`
	BytesSent     int64     `json:"bytes_sent"`
	BytesReceived int64     `json:"bytes_received"`
	ModelHash     string    `json:"model_hash"`
	Attempts      int       `json:"attempts"`
	// Owners is how many members owned a segment of the robust average
	// (fewer than Members when some did not reach every other directly);
	// absent with --averaging mean.
	Owners int `json:"owners,omitempty"`
}

// maxHistory bounds the outer steps kept in memory for /v1/history.
const maxHistory = 10000

// board holds what the API serves. The training and mesh goroutines write it;
// HTTP handlers read copies. All methods are safe for concurrent use.
type board struct {
	mu      sync.Mutex
	status  Status
	peers   []PeerStatus
	history []OuterRecord
	changed chan struct{} // closed at the next change (changes); nil until asked for
}

// changes returns a channel that is closed at the board's next change: a
// watcher waits on it instead of polling.
func (b *board) changes() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.changed
}

// notify wakes the watchers of changes; b.mu is held.
func (b *board) notify() {
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

func (b *board) update(f func(s *Status)) {
	b.mu.Lock()
	f(&b.status)
	b.notify()
	b.mu.Unlock()
}

func (b *board) snapshot() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.status
	s.Addrs = append([]string{}, s.Addrs...)
	s.Members = append([]string{}, s.Members...)
	if s.Download != nil {
		d := *s.Download
		s.Download = &d
	}
	if s.Waiting != nil {
		w := *s.Waiting
		s.Waiting = &w
	}
	if !s.StartedAt.IsZero() {
		s.UptimeSec = time.Since(s.StartedAt).Seconds()
	}
	return s
}

func (b *board) setPeers(p []PeerStatus) {
	b.mu.Lock()
	b.peers = p
	b.notify()
	b.mu.Unlock()
}

// peerList returns a copy of the peers, never nil: the API serves an empty
// table as [] (the page and clients iterate over it).
func (b *board) peerList() []PeerStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]PeerStatus{}, b.peers...)
}

func (b *board) record(r OuterRecord) {
	b.mu.Lock()
	b.history = append(b.history, r)
	if len(b.history) > maxHistory {
		b.history = append(b.history[:0:0], b.history[len(b.history)-maxHistory:]...)
	}
	b.notify()
	b.mu.Unlock()
}

// historyList returns a copy of the history, never nil.
func (b *board) historyList() []OuterRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]OuterRecord{}, b.history...)
}
