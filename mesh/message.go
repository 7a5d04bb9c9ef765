package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Wire format of a mesh message (all integers are unsigned varints unless
// noted, all strings are a varint length then that many bytes):
//
//	version   uint8 (WireVersion)
//	type      uint8 (MsgType)
//	from      string   ≤ MaxPeerIDLen
//	incarn.   varint   (sender's Config.Incarnation)
//	state     uint8 (State)
//	step      varint
//	hash      string   ≤ MaxHashLen
//	prevHash  string   ≤ MaxHashLen
//	inner     varint   ≤ MaxInnerSteps
//	round     varint   ≤ MaxRound
//	members   count, then (id string, innerSteps varint) each
//	excluded  count, then id string each      (members+excluded ≤ MaxMembers)
//	addrs     count ≤ MaxAddrs, then string ≤ MaxAddrLen each
//
// Every field is always present, so one decoder serves every type and the
// encoding of a valid message is canonical (Encode∘Decode is the identity on
// Encode's output).
const (
	// Topic is the gossipsub topic of a run's mesh messages: fmt.Sprintf(Topic, run).
	Topic = "/intellect/%s/mesh/2"
	// WireVersion is the first byte of every encoded message.
	WireVersion = 2
	// MaxMessageSize bounds an encoded message; gossipsub's cap is 1 MiB.
	MaxMessageSize = 32 << 10
	// MaxMembers bounds the members plus excluded peers named in one message,
	// and so the size of a ring.
	MaxMembers = 256
	// MaxPeerIDLen bounds a peer id in bytes (a libp2p id is 38–52 bytes).
	MaxPeerIDLen = 64
	// MaxHashLen bounds a model hash in bytes (hex SHA-256 is 64).
	MaxHashLen = 128
	// MaxAddrs bounds the addresses a heartbeat or join carries.
	MaxAddrs = 16
	// MaxAddrLen bounds one address in bytes.
	MaxAddrLen = 256
	// MaxInnerSteps bounds the inner steps a peer may claim for one outer step.
	MaxInnerSteps = 1 << 24
	// MaxRound bounds an agreement round number.
	MaxRound = 1 << 20
)

// PeerID names a peer: node uses the libp2p peer id's string form.
type PeerID string

// MsgType is the kind of a mesh message. Append only: never renumber.
type MsgType uint8

// Message types.
const (
	// MsgHeartbeat is sent every HeartbeatTicks: state, step, model hash,
	// inner steps done, addresses.
	MsgHeartbeat MsgType = 1
	// MsgJoin announces a node that starts without the current model.
	MsgJoin MsgType = 2
	// MsgLeave is a deathrattle: the sender leaves the run now.
	MsgLeave MsgType = 3
	// MsgReady says the sender finished InnerSteps inner steps of Step from
	// the model whose θ₀ hash is Hash.
	MsgReady MsgType = 4
	// MsgPropose is the sender's vote in agreement round Round of Step: the
	// ring Members (sorted) and the peers it excludes from Step.
	MsgPropose MsgType = 5
	// MsgClose says the sender, Ready in Step with the model Hash, holds
	// the step closed (Config.CloseFraction): members still training end
	// their phase and are Ready with the inner steps they finished.
	MsgClose   MsgType = 6
	msgTypeEnd MsgType = 7
)

// String returns the type's name.
func (t MsgType) String() string {
	switch t {
	case MsgHeartbeat:
		return "heartbeat"
	case MsgJoin:
		return "join"
	case MsgLeave:
		return "leave"
	case MsgReady:
		return "ready"
	case MsgPropose:
		return "propose"
	case MsgClose:
		return "close"
	}
	return fmt.Sprintf("msgtype(%d)", uint8(t))
}

// State is where a node stands in the protocol. Append only: never renumber.
type State uint8

// Node states.
const (
	// StateJoining: the node holds no usable model and looks for one to fetch.
	StateJoining State = 1
	// StateSyncing: node is fetching a model (Ready.Fetch or Ready.Adopt).
	StateSyncing State = 2
	// StateTraining: a member running the inner steps of its current step.
	StateTraining State = 3
	// StateReady: inner steps done, waiting for peers before voting.
	StateReady State = 4
	// StateAgreeing: voted in the agreement of the current step.
	StateAgreeing State = 5
	// StateReducing: a ring is decided; the all-reduce runs.
	StateReducing State = 6
	// StateExcluded: ready but left out of the current step's ring; it
	// waits for the next step's model.
	StateExcluded State = 7
	// StateLeft: the node left the run.
	StateLeft State = 8
	stateEnd  State = 9
)

// String returns the state's name.
func (s State) String() string {
	names := [...]string{"invalid", "joining", "syncing", "training", "ready", "agreeing", "reducing", "excluded", "left"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// hasModel reports whether a node in this state holds a model that counts
// towards its lineage.
func (s State) hasModel() bool {
	return s == StateTraining || s == StateReady || s == StateAgreeing || s == StateReducing
}

// Member is one ring member with the inner steps it contributes (its weight).
type Member struct {
	ID         PeerID
	InnerSteps uint32
}

// Message is one gossip message of the mesh topic. Fields a type does not use
// are zero. From is the sender; node checks it equals the pubsub signer.
type Message struct {
	Type MsgType
	From PeerID
	// Incarnation is the sender's Config.Incarnation: it grows when the
	// peer restarts, so messages of a previous run can be told apart.
	Incarnation uint64
	State       State    // sender's state (heartbeat)
	Step        uint64   // outer step the message is about
	Hash        string   // hash of θ₀(Step), the model the sender holds for Step
	PrevHash    string   // heartbeat: hash of θ₀(Step−1), "" if unknown
	InnerSteps  uint32   // heartbeat, ready: inner steps done in Step
	Round       uint32   // propose: agreement round
	Members     []Member // propose: the proposed ring, sorted by ID, unique
	Excluded    []PeerID // propose: peers excluded from Step, sorted, unique
	Addrs       []string // heartbeat, join: the sender's multiaddrs
	// Links (propose): the voter's measured cost of the link to each of
	// Members, aligned with Members, in LinkUnit (0: unknown); empty when it
	// has measured nothing. Every decider holds every member's vote of the
	// deciding round, so all compute the same ring order from these rows.
	Links []uint32
}

// LinkUnit is the unit of Message.Links: round-trip time in 100 µs steps.
const LinkUnit = 100 // µs

// Errors returned by Decode and Message.Validate.
var (
	// ErrMalformed: the bytes are not a mesh message.
	ErrMalformed = errors.New("mesh: malformed message")
	// ErrTooLarge: a message or one of its fields exceeds its limit.
	ErrTooLarge = errors.New("mesh: message too large")
	// ErrInvalid: a well-formed message breaks a rule of the protocol.
	ErrInvalid = errors.New("mesh: invalid message")
)

// Validate checks the limits and rules every message must satisfy.
func (m *Message) Validate() error {
	if m.Type == 0 || m.Type >= msgTypeEnd {
		return fmt.Errorf("%w: type %d", ErrInvalid, m.Type)
	}
	if m.State >= stateEnd {
		return fmt.Errorf("%w: state %d", ErrInvalid, m.State)
	}
	if m.From == "" || len(m.From) > MaxPeerIDLen {
		return fmt.Errorf("%w: sender id of %d bytes", ErrInvalid, len(m.From))
	}
	if len(m.Hash) > MaxHashLen || len(m.PrevHash) > MaxHashLen {
		return fmt.Errorf("%w: hash longer than %d", ErrTooLarge, MaxHashLen)
	}
	if m.InnerSteps > MaxInnerSteps || m.Round > MaxRound {
		return fmt.Errorf("%w: inner steps %d or round %d", ErrTooLarge, m.InnerSteps, m.Round)
	}
	if len(m.Members)+len(m.Excluded) > MaxMembers {
		return fmt.Errorf("%w: %d members+excluded > %d", ErrTooLarge, len(m.Members)+len(m.Excluded), MaxMembers)
	}
	if len(m.Addrs) > MaxAddrs {
		return fmt.Errorf("%w: %d addrs > %d", ErrTooLarge, len(m.Addrs), MaxAddrs)
	}
	if err := m.validateLists(); err != nil {
		return err
	}
	return m.validateType()
}

func (m *Message) validateLists() error {
	for i, mb := range m.Members {
		if mb.ID == "" || len(mb.ID) > MaxPeerIDLen || mb.InnerSteps > MaxInnerSteps {
			return fmt.Errorf("%w: member %d", ErrInvalid, i)
		}
		if i > 0 && m.Members[i-1].ID >= mb.ID {
			return fmt.Errorf("%w: members not sorted and unique", ErrInvalid)
		}
	}
	for i, id := range m.Excluded {
		if id == "" || len(id) > MaxPeerIDLen {
			return fmt.Errorf("%w: excluded %d", ErrInvalid, i)
		}
		if i > 0 && m.Excluded[i-1] >= id {
			return fmt.Errorf("%w: excluded not sorted and unique", ErrInvalid)
		}
	}
	for _, a := range m.Addrs {
		if len(a) > MaxAddrLen {
			return fmt.Errorf("%w: addr of %d bytes", ErrTooLarge, len(a))
		}
	}
	if len(m.Links) != 0 && (m.Type != MsgPropose || len(m.Links) != len(m.Members)) {
		return fmt.Errorf("%w: %d link costs for %d members of a %v", ErrInvalid, len(m.Links), len(m.Members), m.Type)
	}
	return nil
}

func (m *Message) validateType() error {
	switch m.Type {
	case MsgHeartbeat:
		if m.State == 0 {
			return fmt.Errorf("%w: heartbeat without state", ErrInvalid)
		}
	case MsgReady, MsgClose:
		if m.Hash == "" {
			return fmt.Errorf("%w: %v without model hash", ErrInvalid, m.Type)
		}
	case MsgPropose:
		if m.Hash == "" || len(m.Members) == 0 {
			return fmt.Errorf("%w: propose without hash or members", ErrInvalid)
		}
		if _, ok := slices.BinarySearchFunc(m.Members, m.From, meshCmpMember); !ok {
			return fmt.Errorf("%w: proposer not in its proposal", ErrInvalid)
		}
	}
	return nil
}

func meshCmpMember(a Member, id PeerID) int {
	switch {
	case a.ID < id:
		return -1
	case a.ID > id:
		return 1
	}
	return 0
}

// Encode validates m and returns its wire form (at most MaxMessageSize bytes).
func Encode(m Message) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 64+len(m.From)+len(m.Hash)+len(m.PrevHash)+len(m.Members)*(len(m.From)+4))
	b = append(b, WireVersion, byte(m.Type))
	b = meshAppendString(b, string(m.From))
	b = binary.AppendUvarint(b, m.Incarnation)
	b = append(b, byte(m.State))
	b = binary.AppendUvarint(b, m.Step)
	b = meshAppendString(b, m.Hash)
	b = meshAppendString(b, m.PrevHash)
	b = binary.AppendUvarint(b, uint64(m.InnerSteps))
	b = binary.AppendUvarint(b, uint64(m.Round))
	b = binary.AppendUvarint(b, uint64(len(m.Members)))
	for _, mb := range m.Members {
		b = meshAppendString(b, string(mb.ID))
		b = binary.AppendUvarint(b, uint64(mb.InnerSteps))
	}
	b = binary.AppendUvarint(b, uint64(len(m.Excluded)))
	for _, id := range m.Excluded {
		b = meshAppendString(b, string(id))
	}
	b = binary.AppendUvarint(b, uint64(len(m.Addrs)))
	for _, a := range m.Addrs {
		b = meshAppendString(b, a)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Links)))
	for _, c := range m.Links {
		b = binary.AppendUvarint(b, uint64(c))
	}
	if len(b) > MaxMessageSize {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, len(b), MaxMessageSize)
	}
	return b, nil
}

func meshAppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode parses and validates one message. It never allocates more than
// the limits allow, whatever b claims.
func Decode(b []byte) (Message, error) {
	if len(b) > MaxMessageSize {
		return Message{}, fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, len(b), MaxMessageSize)
	}
	d := meshDecoder{b: b}
	m := d.message()
	if d.err != nil {
		return Message{}, d.err
	}
	if len(d.b) != 0 {
		return Message{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d.b))
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

// meshDecoder reads fields off b; the first error sticks and later reads
// return zero values.
type meshDecoder struct {
	b   []byte
	err error
}

func (d *meshDecoder) message() Message {
	var m Message
	if v := d.byte(); d.err == nil && v != WireVersion {
		d.fail(fmt.Errorf("%w: wire version %d", ErrMalformed, v))
	}
	m.Type = MsgType(d.byte())
	m.From = PeerID(d.string(MaxPeerIDLen))
	m.Incarnation = d.uvarint(^uint64(0))
	m.State = State(d.byte())
	m.Step = d.uvarint(^uint64(0))
	m.Hash = d.string(MaxHashLen)
	m.PrevHash = d.string(MaxHashLen)
	m.InnerSteps = uint32(d.uvarint(MaxInnerSteps))
	m.Round = uint32(d.uvarint(MaxRound))
	m.Members = d.members()
	m.Excluded = d.excluded(MaxMembers - len(m.Members))
	m.Addrs = d.addrs()
	m.Links = d.links(len(m.Members))
	return m
}

// links reads at most max link costs (one per member).
func (d *meshDecoder) links(max int) []uint32 {
	n := d.uvarint(uint64(max))
	if n == 0 || !d.room(n, 1) {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(d.uvarint(1<<32 - 1))
	}
	return out
}

func (d *meshDecoder) members() []Member {
	n := d.uvarint(MaxMembers)
	if n == 0 || !d.room(n, 2) {
		return nil
	}
	out := make([]Member, n)
	for i := range out {
		out[i] = Member{ID: PeerID(d.string(MaxPeerIDLen)), InnerSteps: uint32(d.uvarint(MaxInnerSteps))}
	}
	return out
}

func (d *meshDecoder) excluded(limit int) []PeerID {
	n := d.uvarint(uint64(limit))
	if n == 0 || !d.room(n, 2) {
		return nil
	}
	out := make([]PeerID, n)
	for i := range out {
		out[i] = PeerID(d.string(MaxPeerIDLen))
	}
	return out
}

func (d *meshDecoder) addrs() []string {
	n := d.uvarint(MaxAddrs)
	if n == 0 || !d.room(n, 1) {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.string(MaxAddrLen)
	}
	return out
}

// room reports whether n entries of at least minSize bytes each can still
// follow; it fails the decoder otherwise, before anything is allocated.
func (d *meshDecoder) room(n uint64, minSize int) bool {
	if d.err != nil {
		return false
	}
	if n > uint64(len(d.b)/minSize) {
		d.fail(fmt.Errorf("%w: %d entries cannot fit in %d bytes", ErrMalformed, n, len(d.b)))
		return false
	}
	return true
}

func (d *meshDecoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *meshDecoder) byte() byte {
	if len(d.b) < 1 {
		d.fail(fmt.Errorf("%w: truncated", ErrMalformed))
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *meshDecoder) uvarint(limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(fmt.Errorf("%w: bad varint", ErrMalformed))
		return 0
	}
	if v > limit {
		d.fail(fmt.Errorf("%w: value %d > %d", ErrTooLarge, v, limit))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *meshDecoder) string(limit int) string {
	n := d.uvarint(uint64(limit))
	if d.err != nil {
		return ""
	}
	if uint64(len(d.b)) < n {
		d.fail(fmt.Errorf("%w: string of %d bytes truncated", ErrMalformed, n))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
