package mesh

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
)

// ErrTooManyPeers is returned by Step when a new sender would exceed
// meshMaxTrackedPeers live peers.
var ErrTooManyPeers = errors.New("mesh: too many peers")

// meshMaxTrackedPeers bounds the peer table; dead peers are forgotten first.
const meshMaxTrackedPeers = 4 * MaxMembers

// meshForgetDeadAfter: a dead peer's entry is dropped after this many DeadTicks.
const meshForgetDeadAfter = 20

// Ready is what the Mesh asks node to do, returned by Mesh.Ready. node
// carries it out, then calls Mesh.Advance with it.
type Ready struct {
	// Messages to publish on the mesh topic, in order.
	Messages []Message
	// Ring, when set, was just decided for the current step: start the
	// all-reduce, then call Completed or ReportFailure.
	Ring *Ring
	// Fetch, when set: download the named model (joining, or left out of
	// the last ring), then call Synced.
	Fetch *Fetch
	// Adopt, when set: this node's model diverged from a larger side of the
	// network (partition healed, or restart far behind); replace it by the
	// named model by checkpoint transfer, log it, then call Synced.
	Adopt *Fetch
	// Dead lists peers declared dead (missed heartbeats) or gone (Leave)
	// since the last Ready, sorted.
	Dead []PeerID
	// Close, when set, says the step this node trains (Close.Step, the
	// step of Model()) closed (Config.CloseFraction): end the phase at the
	// next inner-step boundary, or at the last one from a snapshot, and
	// call SetReady with the inner steps finished. Given once per step.
	Close *Close
	// LeftOut lists members this node's agreement left out of the current
	// step because no ring of direct links (see LinkUnreachable) could hold
	// them with the others, in the order it happened.
	LeftOut []PeerID
	// Equivocations lists peers caught voting twice, differently, in one
	// round (see Equivocation), in the order it happened. Each is already
	// out of the current step; node should exclude it from the run.
	Equivocations []Equivocation
	// State is the node's state now; StateChanged says it changed since the
	// last Ready.
	State        State
	StateChanged bool
}

// Equivocation is evidence that Peer, in one incarnation, proposed two
// different rings (Members) for the same Step, model Hash and agreement
// Round. An honest node votes at most once per round (re-broadcasts repeat
// the same members), and mesh messages are signed by their sender
// (gossipsub StrictSign; node checks From against the signer), so the two
// messages are the peer's own: it tried to make deciders decide different
// rings.
type Equivocation struct {
	Peer  PeerID
	Step  uint64
	Hash  string
	Round uint32
	// First and Second are the two member lists.
	First, Second []Member
}

// meshPeer is what this node knows of another peer.
type meshPeer struct {
	state       State
	step        uint64
	hash        string
	prevHash    string
	inner       uint32
	lastSeen    uint64 // tick of the last message
	addrs       []string
	dead        bool
	votes       meshVotes // its latest vote per step, a few steps kept
	equivocated bool      // caught voting twice in one round (reported once)
	noWaitEnd   uint64    // votes of steps before this one do not wait for it (decide)
	disputeRun  int       // steps in a row it was in a dispute (exclusions), not in a ring
	lateRun     int       // steps in a row it missed a closed step's wait (closeWaited), not in a ring
	incarnation uint64
	restarts    uint64
}

// moved records that the peer holds the model (step, hash), learnt from a
// Ready or a vote, which carry no PrevHash: one step past the model it
// held, the model it held is its predecessor. Else its PrevHash stayed
// that of its last heartbeat, and an Excluded node whose peers had all
// voted on in the next step thought them gone and trained the step alone
// (maybeRejoinStep): a fork of one.
func (p *meshPeer) moved(step uint64, hash string) {
	if step == p.step+1 && p.hash != "" {
		p.prevHash = p.hash
	} else if step != p.step || hash != p.hash {
		p.prevHash = "" // unknown until its next heartbeat
	}
	p.step, p.hash = step, hash
}

// Mesh is the membership and epoch state machine of one node. It is not safe
// for concurrent use: node drives it from one goroutine.
type Mesh struct {
	cfg     Config
	rng     *rand.Rand
	tick    uint64
	hbDue   uint64
	lineDue uint64

	state       State
	step        uint64
	hash        string
	prevHash    string
	inner       uint32
	established bool                 // took part in a completed ring, or synced from peers
	line        map[uint64]string    // this node's line: the hashes of its recent steps (meshLineDepth)
	history     []Made               // who made the line's last MadeWindow models (admit.go)
	lineMembers map[PeerID]bool      // the members named in history
	known       map[PeerID]meshKnown // peers that made a model of this node's line (KnownWindow)

	peers      map[PeerID]*meshPeer
	ag         meshAgreement
	ring       *Ring // decided ring of the current step while reducing
	last       *Ring // last decided ring, for Status
	fetch      *Fetch
	fetchAt    uint64
	syncFailed bool

	linkCost map[PeerID]uint32  // measured link costs to peers (SetLinkCosts)
	voted    map[meshKey]uint32 // the last round this node voted in, for its last few models (cast)
	casts    uint64             // serial of this node's vote, grows with each cast and agreement (sameAsMine)
	peersGen uint64             // grows when an entry of peers is made or dropped (votePeers)

	out       Ready
	prevState State
	failures  uint64
	adoptions uint64
}

// New returns the state machine of node cfg.ID, which holds the model of
// outer step `step` whose θ₀ hash is modelHash. A fresh network's nodes all
// pass step 0 and the hash of the seeded initial model. modelHash "" means
// the node holds no model: it starts Joining and fetches one from its peers.
// A node restarted from a checkpoint passes that checkpoint's step and hash;
// if the network has moved on it is asked to fetch.
func New(cfg Config, step uint64, modelHash string) (*Mesh, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(modelHash) > MaxHashLen {
		return nil, fmt.Errorf("%w: model hash longer than %d", ErrConfig, MaxHashLen)
	}
	m := &Mesh{
		cfg:   cfg,
		rng:   rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6d657368)),
		peers: make(map[PeerID]*meshPeer),
		step:  step,
		hash:  modelHash,
	}
	if err := m.setHistory(step, cfg.History); err != nil {
		return nil, fmt.Errorf("%w: history: %w", ErrConfig, err)
	}
	m.hbDue = 1 + uint64(m.rng.IntN(cfg.HeartbeatTicks))
	m.resetAgreement()
	if step == 0 && cfg.PastInitial {
		m.hash = "" // the initial model is no model to go on with
	}
	if m.hash == "" {
		m.state = StateJoining
		m.send(Message{Type: MsgJoin, From: cfg.ID, State: StateJoining, Addrs: slices.Clone(cfg.Addrs)})
	} else {
		m.state = StateTraining
		m.heartbeat()
	}
	m.out.StateChanged = true
	return m, nil
}

// Tick advances the mesh's clock by one tick: heartbeats, failure detection,
// straggler and round timeouts, model sync decisions.
func (m *Mesh) Tick() {
	if m.state == StateLeft {
		return
	}
	m.tick++
	m.detectDead()
	if m.tick >= m.hbDue {
		m.heartbeat()
		if m.proposalDue() {
			m.send(m.proposeMsg())
		}
	}
	m.roundTimeout()
	m.progress()
	if m.tick >= m.lineDue { // the view changes by heartbeats: look as often
		m.lineDue = m.tick + uint64(m.cfg.HeartbeatTicks)
		m.checkLineage()
	}
}

// Step feeds one message received from the mesh topic. A message that fails
// validation returns an error and changes nothing.
func (m *Mesh) Step(msg Message) error {
	if err := msg.Validate(); err != nil {
		return err
	}
	if m.state == StateLeft || msg.From == m.cfg.ID {
		return nil
	}
	p, err := m.peer(msg.From)
	if err != nil {
		return err
	}
	if msg.Incarnation < p.incarnation {
		return nil // a late message of the peer's previous run
	}
	if msg.Incarnation > p.incarnation {
		m.onRestart(msg.From, p, msg.Incarnation)
	}
	p.lastSeen = m.tick
	if p.dead && msg.Type != MsgLeave {
		p.dead = false
	}
	switch msg.Type {
	case MsgHeartbeat:
		m.onHeartbeat(msg.From, p, msg)
	case MsgJoin:
		p.state = StateJoining
		p.addrs = slices.Clone(msg.Addrs)
		m.hbDue = m.tick // answer a joiner at the next tick
	case MsgLeave:
		m.markDead(msg.From, p)
		p.state = StateLeft
	case MsgReady:
		if msg.Step >= p.step { // else a late copy: the peer moved on
			p.moved(msg.Step, msg.Hash)
			p.state, p.inner = StateReady, msg.InnerSteps
		}
		m.noteReady(msg.From, msg.Step, msg.Hash, msg.InnerSteps)
	case MsgPropose:
		m.onPropose(msg.From, p, &msg)
	case MsgClose:
		m.onClose(msg)
	}
	m.progress()
	return nil
}

// onRestart: the peer runs a new incarnation. Its votes are void, and it
// lost any Ready of the current step, so it sits this step out (X only
// grows: excluding it is the choice every node makes alike).
func (m *Mesh) onRestart(id PeerID, p *meshPeer, inc uint64) {
	restarted := p.incarnation != 0 || p.votes.n > 0
	p.incarnation = inc
	if !restarted {
		return
	}
	p.votes = meshVotes{}
	p.restarts++
	if _, in := m.ag.known[id]; in {
		m.exclude(id)
	}
}

func (m *Mesh) onHeartbeat(id PeerID, p *meshPeer, msg Message) {
	p.state, p.step, p.hash, p.prevHash, p.inner = msg.State, msg.Step, msg.Hash, msg.PrevHash, msg.InnerSteps
	p.addrs = slices.Clone(msg.Addrs)
	if msg.State == StateLeft {
		m.markDead(id, p)
		return
	}
	switch msg.State {
	case StateReady, StateAgreeing, StateReducing:
		m.noteReady(id, msg.Step, msg.Hash, msg.InnerSteps)
	case StateJoining, StateSyncing, StateExcluded:
		// It gave up this step (a stale heartbeat from before it synced
		// into the step names another model, and is ignored).
		if _, in := m.ag.known[id]; in && msg.Step == m.ag.step && msg.Hash == m.ag.hash {
			m.exclude(id)
		}
	}
}

// peer returns the entry of id, creating it (bounded).
func (m *Mesh) peer(id PeerID) (*meshPeer, error) {
	if p, ok := m.peers[id]; ok {
		return p, nil
	}
	if len(m.peers) >= meshMaxTrackedPeers {
		m.forgetDead(0)
		if len(m.peers) >= meshMaxTrackedPeers {
			return nil, fmt.Errorf("%w: %d tracked", ErrTooManyPeers, len(m.peers))
		}
	}
	p := &meshPeer{lastSeen: m.tick}
	m.peers[id] = p
	m.peersGen++
	return p, nil
}

// Heard tells the mesh that bytes from id arrived outside the mesh topic
// (the averaging's streams): id is alive. A member whose link is full of
// its all-reduce sends its heartbeats behind that data, seconds late on a
// slow uplink, while the data itself proves it is up. Only a live peer the
// mesh knows is refreshed: a dead one comes back by a message of its own,
// which carries its incarnation.
func (m *Mesh) Heard(id PeerID) {
	if p := m.peers[id]; p != nil && !p.dead && m.state != StateLeft {
		p.lastSeen = m.tick
	}
}

// detectDead declares dead the peers not heard from for DeadTicks.
func (m *Mesh) detectDead() {
	var gone []PeerID
	for id, p := range m.peers {
		if !p.dead && m.tick-p.lastSeen > uint64(m.cfg.DeadTicks) {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		m.markDead(id, m.peers[id])
	}
	if m.tick%uint64(m.cfg.DeadTicks) == 0 {
		m.forgetDead(uint64(meshForgetDeadAfter * m.cfg.DeadTicks))
	}
}

func (m *Mesh) markDead(id PeerID, p *meshPeer) {
	if !p.dead {
		p.dead = true
		m.out.Dead = append(m.out.Dead, id)
	}
	if _, in := m.ag.known[id]; in || p.step == m.step {
		m.exclude(id)
	}
}

func (m *Mesh) forgetDead(after uint64) {
	for id, p := range m.peers {
		if p.dead && m.tick-p.lastSeen >= after {
			delete(m.peers, id)
			m.peersGen++
		}
	}
}

func (m *Mesh) send(msg Message) {
	msg.Incarnation = m.cfg.Incarnation
	m.out.Messages = append(m.out.Messages, msg)
}

func (m *Mesh) heartbeat() {
	m.hbDue = m.tick + uint64(m.cfg.HeartbeatTicks)
	m.send(Message{
		Type: MsgHeartbeat, From: m.cfg.ID, State: m.state, Step: m.step,
		Hash: m.hash, PrevHash: m.prevHash, InnerSteps: m.inner, Addrs: slices.Clone(m.cfg.Addrs),
	})
}

func (m *Mesh) setState(s State) {
	m.state = s
}

// SetReady tells the mesh that this node finished innerSteps inner steps of
// outer step `step` (a late joiner may have done fewer than H). Ignored
// unless the node is Training at that step.
func (m *Mesh) SetReady(step uint64, innerSteps int) {
	if m.state != StateTraining || step != m.step {
		return
	}
	m.inner = uint32(min(max(innerSteps, 0), MaxInnerSteps))
	m.ag.known[m.cfg.ID] = m.inner
	m.ag.readyAt = m.tick
	m.setState(StateReady)
	m.send(Message{Type: MsgReady, From: m.cfg.ID, Step: m.step, Hash: m.hash, InnerSteps: m.inner})
	m.progress()
}

// ReportFailure tells the mesh that the all-reduce of `step` failed because
// of peer. The peer is excluded from this step and the survivors agree a new
// ring for the same step in the next round. Ignored unless reducing `step`.
func (m *Mesh) ReportFailure(step uint64, peer PeerID) {
	if m.state != StateReducing || step != m.step {
		return
	}
	m.failures++
	// A peer already voting in a later round of this step did not fail: it
	// left the ring for a reason its vote carries.
	if v := m.latestVote(peer); peer != m.cfg.ID && (v == nil || v.round <= m.ag.round) {
		m.exclude(peer)
	}
	m.ring = nil
	m.setState(StateAgreeing)
	m.vote(max(m.ag.round+1, m.ag.maxRound))
	m.progress()
}

// Completed tells the mesh that the all-reduce of `step` was applied: the
// node now holds θ₀ of step+1, whose hash is newHash. Ignored unless
// reducing `step`.
func (m *Mesh) Completed(step uint64, newHash string) {
	if m.state != StateReducing || step != m.step || newHash == "" || len(newHash) > MaxHashLen {
		return
	}
	if m.ring != nil {
		m.madeStep(step+1, m.ring.Members)
	}
	m.moveTo(step+1, newHash, m.hash)
}

// Synced tells the mesh that node now holds the model of `step` whose θ₀
// hash is hash (after a Fetch or Adopt, or a checkpoint loaded on its own),
// and the membership history that came with it (History of the donor; an
// invalid one is ignored, as none: ValidateHistory tells node why).
func (m *Mesh) Synced(step uint64, hash string, history []Made) {
	if m.state == StateLeft || hash == "" || len(hash) > MaxHashLen {
		return
	}
	_ = m.setHistory(step, history) // node validated it and says why
	prev := ""
	if m.fetch != nil && m.fetch.Step == step && m.fetch.Hash == hash {
		prev = m.fetch.PrevHash
	}
	m.moveTo(step, hash, prev)
}

// SyncFailed tells the mesh that the last Fetch or Adopt failed (donors
// gone or moved on, bad data). It chooses a model and donors again at the
// next tick instead of after SyncTimeoutTicks. Ignored unless Syncing.
func (m *Mesh) SyncFailed() {
	if m.state != StateSyncing {
		return
	}
	m.syncFailed = true
	m.lineDue = m.tick
}

func (m *Mesh) moveTo(step uint64, hash, prevHash string) {
	if m.line == nil || step != m.step+1 || prevHash != m.hash || m.hash == "" {
		m.line = make(map[uint64]string) // a new line (fetched or adopted)
	}
	m.line[step] = hash
	if step > 0 && prevHash != "" {
		m.line[step-1] = prevHash
	}
	if step >= meshLineDepth {
		delete(m.line, step-meshLineDepth)
	}
	same := step == m.step && hash == m.hash
	m.step, m.hash, m.prevHash = step, hash, prevHash
	m.inner = 0
	// Back at its own model is not synced from peers: a node held to the
	// minimum whose fetch failed stays held.
	m.established = m.established || !same
	m.ring, m.fetch, m.syncFailed = nil, nil, false
	m.resetAgreement()
	m.setState(StateTraining)
	m.heartbeat()
}

// meshLineDepth is how many steps of its own line a node remembers: peers
// left behind on it are not another side to adopt (checkMember).
const meshLineDepth = 64

// Leave broadcasts a Leave message; peers drop this node at once. The mesh
// does nothing after it.
func (m *Mesh) Leave() {
	if m.state == StateLeft {
		return
	}
	m.setState(StateLeft)
	m.send(Message{Type: MsgLeave, From: m.cfg.ID, State: StateLeft, Step: m.step, Hash: m.hash})
}

// HasReady reports whether Ready has anything for node.
func (m *Mesh) HasReady() bool {
	o := &m.out
	return len(o.Messages) > 0 || o.Ring != nil || o.Fetch != nil || o.Adopt != nil || o.Close != nil ||
		len(o.Dead) > 0 || len(o.LeftOut) > 0 || len(o.Equivocations) > 0 || o.StateChanged || m.state != m.prevState
}

// Ready returns what node must do now. Call Advance with it once done.
func (m *Mesh) Ready() Ready {
	rd := m.out
	rd.State = m.state
	rd.StateChanged = rd.StateChanged || m.state != m.prevState
	slices.Sort(rd.Dead)
	return rd
}

// Advance marks rd, returned by the last Ready, as carried out. It never
// modifies rd: node may keep using its slices.
func (m *Mesh) Advance(rd Ready) {
	m.out.Messages = meshDropFirst(m.out.Messages, len(rd.Messages))
	m.out.Dead = meshDropFirst(m.out.Dead, len(rd.Dead))
	m.out.LeftOut = meshDropFirst(m.out.LeftOut, len(rd.LeftOut))
	m.out.Equivocations = meshDropFirst(m.out.Equivocations, len(rd.Equivocations))
	if rd.Ring == m.out.Ring {
		m.out.Ring = nil
	}
	if rd.Fetch == m.out.Fetch {
		m.out.Fetch = nil
	}
	if rd.Adopt == m.out.Adopt {
		m.out.Adopt = nil
	}
	if rd.Close == m.out.Close {
		m.out.Close = nil
	}
	m.out.StateChanged = false
	m.prevState = rd.State
}

// meshDropFirst returns s without its first n elements, in a new array so
// that a Ready handed out keeps its contents.
func meshDropFirst[T any](s []T, n int) []T {
	if n >= len(s) {
		return nil
	}
	return slices.Clone(s[n:])
}

// SetStragglerTicks changes how long a Ready node waits for live peers of
// its step that are not Ready yet (Config.StragglerTicks) from the next
// check on. node/ raises it in overlapped mode, where a faster member is
// Ready a whole phase before a slower one and waiting costs no compute.
// Values below 1 are ignored.
func (m *Mesh) SetStragglerTicks(n int) {
	if n >= 1 {
		m.cfg.StragglerTicks = n
	}
}
