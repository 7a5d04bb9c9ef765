package p2p

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// gossipEnvelope is the room pubsub needs around a payload in one RPC frame:
// author, sequence number, topic, signature (Ed25519: 64 bytes) and, for
// other key types, the public key.
const gossipEnvelope = 4 << 10

// gossipSubBuffer is the least capacity of pubsub's subscription queue.
const gossipSubBuffer = 256

// ErrMessageTooLarge is returned by Publish for payloads over
// Config.GossipMaxSize; receivers drop such messages as invalid.
var ErrMessageTooLarge = errors.New("p2p: gossip message too large")

// MeshTopic names, under the run's key, the gossip topic of the membership
// protocol's messages (mesh.Encode); every host joins it. The version
// changes when what the topic carries does: version 1 also carried the
// verdict reports that now have a topic of their own.
const MeshTopic = "mesh/2"

// Limits of Config.Topics.
const (
	maxTopics    = 4
	maxTopicName = 32
)

var topicNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9./-]*$`)

// ErrUnknownTopic is returned by PublishTo and SetTopicValidator for a
// topic the host was not configured with.
var ErrUnknownTopic = errors.New("p2p: not one of the host's gossip topics")

// TopicName returns the gossipsub topic of a run's membership protocol:
// TopicOf(run, id, MeshTopic).
func TopicName(run, id string) string { return TopicOf(run, id, MeshTopic) }

// TopicOf returns the gossipsub topic name of one of a run's topics:
// /intellect/<run>/<id>/<name> for the run manifest id, /intellect/<run>/<name>
// when id is empty.
func TopicOf(run, id, name string) string { return "/intellect/" + runKey(run, id) + "/" + name }

// checkTopics checks Config.Topics.
func checkTopics(names []string) error {
	if len(names) > maxTopics {
		return fmt.Errorf("%d gossip topics, at most %d", len(names), maxTopics)
	}
	seen := map[string]bool{MeshTopic: true}
	for _, n := range names {
		if len(n) > maxTopicName || !topicNamePattern.MatchString(n) {
			return fmt.Errorf("gossip topic %q: want 1-%d of [a-z0-9./-]", n, maxTopicName)
		}
		if seen[n] {
			return fmt.Errorf("gossip topic %q named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// Message is one gossip message of one of the run's topics, delivered after
// signature verification and the topic's validator.
type Message struct {
	// Topic is the topic's name under the run's key: MeshTopic or one of
	// Config.Topics.
	Topic string
	// From is the author, authenticated by the message signature; not
	// necessarily the peer that relayed it.
	From peer.ID
	// Data is the payload; the receiver owns it.
	Data []byte
}

// Validator decides whether a gossip message is well formed. It is called
// concurrently from pubsub's validation workers, for received messages and
// for this host's own publications, before they are delivered or relayed; it
// must not block and must not modify or retain data. Returning false rejects
// the message: it is neither delivered nor forwarded, and the peer that sent
// it loses gossip score (see GossipGraylistThreshold). So return false for
// malformed input only, not for well-formed messages this version does not
// understand, or a newer node would be graylisted by older ones.
type Validator func(from peer.ID, data []byte) bool

// GossipStats counts what happened to gossip messages on this host.
type GossipStats struct {
	Delivered uint64 `json:"delivered"` // handed to the Messages channel
	Rejected  uint64 `json:"rejected"`  // bad or missing signature, over the size limit, or refused by the validator
	Dropped   uint64 `json:"dropped"`   // valid, but the Messages channel was full
	Throttled uint64 `json:"throttled"` // over their author's rate (Config.GossipRate)
	// Overloaded counts messages pubsub dropped unvalidated, its validation
	// queue full or its sender throttled by the peer gater; Unsent the RPCs
	// it dropped on the way to a peer, that peer's outbound queue full.
	// Both are load, not bad input: many mean gossip carries more than
	// the host keeps up with (docs/scale.md).
	Overloaded uint64 `json:"overloaded"`
	Unsent     uint64 `json:"unsent"`
}

// Gossip score thresholds. Peers start at 0 and only lose points, for
// invalid messages: each counts as weight·n² with n the decaying count of
// invalid messages the peer sent or relayed. Four bring a peer under the
// gossip threshold (no more gossip to or from it), five under the publish
// threshold (our messages skip it), seven under the graylist threshold (all
// its RPCs are ignored). The count decays by 1 % a second, so one burst is
// held against a peer for tens of seconds, a persistent spammer for good.
const (
	GossipThreshold         = -100.0
	GossipPublishThreshold  = -200.0
	GossipGraylistThreshold = -400.0

	gossipInvalidWeight = -10.0
	gossipInvalidDecay  = 0.99
	gossipScoreInspect  = time.Second
)

// IP colocation (score component P6): more than gossipColocationThreshold
// peers connected from one public IP address each lose
// gossipColocationWeight·s², s being the surplus. Twelve peers from one
// address are under the gossip threshold, fifteen graylisted: a Sybil farm
// on one machine or one NAT is held back, while a household or a lab of up
// to eight members behind one public address is not touched.
const (
	gossipColocationThreshold = 8
	gossipColocationWeight    = -10.0
)

// gossipColocationWhitelist are the address ranges P6 does not count:
// loopback, private (RFC 1918, ULA), link-local and shared (RFC 6598, also
// Tailscale's) addresses. A peer seen from one of them is on our own machine
// or network, where each member has an address of its own, and a test
// network on 127.0.0.1 has all its members on one address. Only what
// arrives from public addresses, where many peers on one address mean one
// operator, is counted.
var gossipColocationWhitelist = mustParseCIDRs("127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12",
	"192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "fc00::/7", "fe80::/10")

func mustParseCIDRs(cidrs ...string) []*net.IPNet {
	out := make([]*net.IPNet, len(cidrs))
	for i, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			panic(err)
		}
		out[i] = n
	}
	return out
}

// gossipScoreParams scores invalid messages alike on every topic.
func gossipScoreParams(topics []string) *pubsub.PeerScoreParams {
	params := make(map[string]*pubsub.TopicScoreParams, len(topics))
	for _, t := range topics {
		params[t] = &pubsub.TopicScoreParams{
			TopicWeight:                    1,
			TimeInMeshQuantum:              time.Second, // P1-P3b off: weights 0
			InvalidMessageDeliveriesWeight: gossipInvalidWeight,
			InvalidMessageDeliveriesDecay:  gossipInvalidDecay,
		}
	}
	return &pubsub.PeerScoreParams{
		Topics:                      params,
		AppSpecificScore:            func(peer.ID) float64 { return 0 },
		IPColocationFactorWeight:    gossipColocationWeight,
		IPColocationFactorThreshold: gossipColocationThreshold,
		IPColocationFactorWhitelist: gossipColocationWhitelist,
		DecayInterval:               time.Second,
		DecayToZero:                 0.01,
		RetainScore:                 10 * time.Minute, // reconnecting does not wash a score
	}
}

// gossipPeerGaterParams are pubsub's defaults: the peer gater acts only
// while pubsub's validation queue overflows (a flood), and then admits the
// messages of each source IP with the probability of that IP's share of
// good deliveries. Its statistics are per IP: on 127.0.0.1 every peer of a
// test shares one, which is harmless since the queue never overflows there.
func gossipPeerGaterParams() *pubsub.PeerGaterParams { return pubsub.DefaultPeerGaterParams() }

func gossipScoreThresholds() *pubsub.PeerScoreThresholds {
	return &pubsub.PeerScoreThresholds{
		GossipThreshold:   GossipThreshold,
		PublishThreshold:  GossipPublishThreshold,
		GraylistThreshold: GossipGraylistThreshold,
	}
}

// storeScores keeps pubsub's latest score snapshot for PeerInfo.
func (h *Host) storeScores(scores map[peer.ID]float64) { h.gossip.scores.Store(&scores) }

// gossipScore returns a peer's last known gossip score, 0 if unknown.
func (h *Host) gossipScore(id peer.ID) float64 {
	if m := h.gossip.scores.Load(); m != nil {
		return (*m)[id]
	}
	return 0
}

type gossipState struct {
	scores    atomic.Pointer[map[peer.ID]float64]
	ps        *pubsub.PubSub
	topics    []*gossipTopic // [0]: MeshTopic; made by New, joined by Start
	delivered atomic.Uint64
	rejected  atomic.Uint64
	dropped   atomic.Uint64
	throttled atomic.Uint64
	overload  atomic.Uint64
	unsent    atomic.Uint64
	lastMeet  atomic.Int64 // unix ns of the last meetAuthor lookup
	rate      *authorRate
	closeMsgs sync.Once
}

// gossipTopic is one of the run's topics.
type gossipTopic struct {
	name      string // under the run's key: MeshTopic or one of Config.Topics
	validator atomic.Pointer[Validator]
	// topic and sub are set by joinTopics and never written again once
	// Start succeeded.
	topic *pubsub.Topic
	sub   *pubsub.Subscription
}

func newGossipTopics(names []string) []*gossipTopic {
	ts := []*gossipTopic{{name: MeshTopic}}
	for _, n := range names {
		ts = append(ts, &gossipTopic{name: n})
	}
	return ts
}

// gossipTopic returns the topic of that name, or nil.
func (h *Host) gossipTopic(name string) *gossipTopic {
	for _, t := range h.gossip.topics {
		if t.name == name {
			return t
		}
	}
	return nil
}

// joinTopics starts gossipsub, registers the validators and subscribes to
// the run's topics. Messages must be signed by their author and the
// signature is checked (StrictSign). Flood publishing sends our own
// messages straight to every subscribed peer, which in a run's small full
// mesh is the fastest path.
func (h *Host) joinTopics(ctx context.Context) error {
	params := pubsub.DefaultGossipSubParams()
	params.HeartbeatInterval = h.cfg.GossipHeartbeat
	params.HeartbeatInitialDelay = min(params.HeartbeatInitialDelay, h.cfg.GossipHeartbeat)
	params.SlowHeartbeatWarning = 0.5 // warn when a heartbeat takes half its interval
	// A mesh degree of 4 (go-libp2p-pubsub's default is 6): our own
	// messages are flood-published to every subscriber, so the mesh only
	// relays, and each relay is a duplicate a member receives and
	// handles. In the scale lab (docs/scale.md) 4 cut gossip bytes per
	// member and step by 30 % at 16 members and 38 % at 32, gossip CPU
	// about as much, and the messages pubsub dropped for load by 2–3×.
	params.D, params.Dlo, params.Dhi, params.Dout, params.Dscore = 4, 3, 8, 1, 2
	var names []string
	for _, t := range h.gossip.topics {
		names = append(names, TopicOf(h.cfg.Run, h.cfg.RunID, t.name))
	}
	ps, err := pubsub.NewGossipSub(ctx, h.h,
		pubsub.WithGossipSubParams(params),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithStrictSignatureVerification(true),
		pubsub.WithMaxMessageSize(h.cfg.GossipMaxSize+gossipEnvelope),
		pubsub.WithFloodPublish(true),
		// pubsub's validation queue (32 by default) is shared by every
		// peer's messages: 63 peers publishing at one heartbeat overflow
		// it, and a message dropped there is lost (the scale lab,
		// docs/scale.md). Queued, it is only late.
		pubsub.WithValidateQueueSize(gossipValidateQueue),
		pubsub.WithPeerExchange(true),
		pubsub.WithLogger(h.log.With("system", "gossip")),
		pubsub.WithRawTracer(gossipTracer{h}),
		pubsub.WithPeerScore(gossipScoreParams(names), gossipScoreThresholds()),
		pubsub.WithPeerScoreInspect(pubsub.PeerScoreInspectFn(h.storeScores), gossipScoreInspect),
		pubsub.WithPeerGater(gossipPeerGaterParams()),
		// Peers not admitted (Host.SetAdmission) are kept out of the mesh
		// and gossip (IHAVE/IWANT/GRAFT); flood publishing still reaches a
		// subscriber until it is refused.
		pubsub.WithPeerFilter(func(p peer.ID, _ string) bool { return h.Admitted(p) }),
	)
	if err != nil {
		return fmt.Errorf("p2p: start gossipsub: %w", err)
	}
	h.gossip.ps = ps
	for i, t := range h.gossip.topics {
		if err := h.joinTopic(t, names[i]); err != nil {
			return err
		}
	}
	return nil
}

// gossipValidateQueue is the length of pubsub's validation queue: the
// messages of MaxMembers peers at once, several times over.
const gossipValidateQueue = 1024

// joinTopic registers t's validator and subscribes to it under its full
// name.
func (h *Host) joinTopic(t *gossipTopic, name string) error {
	ps := h.gossip.ps
	validate := func(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		return h.validate(t, msg)
	}
	if err := ps.RegisterTopicValidator(name, validate, pubsub.WithValidatorInline(true)); err != nil {
		return fmt.Errorf("p2p: register validator on %s: %w", name, err)
	}
	topic, err := ps.Join(name)
	if err != nil {
		return fmt.Errorf("p2p: join %s: %w", name, err)
	}
	// pubsub's own buffer only absorbs bursts until deliverLoop runs; it
	// drops silently when full, so keep it large enough never to be the one.
	sub, err := topic.Subscribe(pubsub.WithBufferSize(max(h.cfg.MessageBuffer, gossipSubBuffer)))
	if err != nil {
		topic.Close()
		return fmt.Errorf("p2p: subscribe %s: %w", name, err)
	}
	t.topic, t.sub = topic, sub
	return nil
}

// leaveTopics cancels the subscriptions and closes the topic handles. The
// fields stay set: once Start succeeded they are never written again, which
// lets Publish read them without a lock after checking h.started.
func (h *Host) leaveTopics() {
	for _, t := range h.gossip.topics {
		if t.sub != nil {
			t.sub.Cancel()
		}
		if t.topic != nil {
			if err := t.topic.Close(); err != nil {
				h.log.Debug("close topic", "topic", t.name, "err", err)
			}
		}
	}
}

// validate is the pubsub validator of topic t: size limit, the author's
// admission, the author's rate (one budget over every topic), then the
// node's hook for t.
func (h *Host) validate(t *gossipTopic, msg *pubsub.Message) pubsub.ValidationResult {
	from, data := msg.GetFrom(), msg.GetData()
	if len(data) > h.cfg.GossipMaxSize {
		return pubsub.ValidationReject
	}
	if !h.Admitted(from) {
		return pubsub.ValidationIgnore // not a run peer (yet): Host.SetAdmission
	}
	if from != h.h.ID() {
		if res := h.rateLimit(msg); res != pubsub.ValidationAccept {
			return res
		}
	}
	if v := t.validator.Load(); v != nil && !(*v)(from, data) {
		return pubsub.ValidationReject
	}
	return pubsub.ValidationAccept
}

// rateLimit charges a message to its author's budget. Over it, the message
// is ignored; over it by a further burst it is rejected, but only when the
// author sent it to us itself: a relay of a flood is not to blame for it.
func (h *Host) rateLimit(msg *pubsub.Message) pubsub.ValidationResult {
	from := msg.GetFrom()
	v, first := h.gossip.rate.take(from)
	if v == rateAccept {
		return pubsub.ValidationAccept
	}
	h.gossip.throttled.Add(1)
	if first {
		h.log.Warn("gossip author over its message rate: dropping its excess messages", "peer", from,
			"rate", h.cfg.GossipRate, "burst", h.cfg.GossipBurst)
	}
	if v == rateReject && msg.ReceivedFrom == from {
		return pubsub.ValidationReject
	}
	return pubsub.ValidationIgnore
}

// SetValidator installs the hook that vets every message of MeshTopic
// (SetTopicValidator).
func (h *Host) SetValidator(v Validator) { _ = h.SetTopicValidator(MeshTopic, v) }

// SetTopicValidator installs the hook that vets every message of one of the
// run's topics before it is delivered or relayed; nil accepts every message
// within the size limit. It may be called at any time, before or after
// Start.
func (h *Host) SetTopicValidator(topic string, v Validator) error {
	t := h.gossipTopic(topic)
	switch {
	case t == nil:
		return fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	case v == nil:
		t.validator.Store(nil)
	default:
		t.validator.Store(&v)
	}
	return nil
}

// Publish signs data and sends it to MeshTopic (PublishTo).
func (h *Host) Publish(ctx context.Context, data []byte) error {
	return h.PublishTo(ctx, MeshTopic, data)
}

// PublishTo signs data and sends it to one of the run's topics. It fails
// with ErrUnknownTopic for another topic, ErrMessageTooLarge above
// Config.GossipMaxSize, with ErrNotStarted before Start, and with a pubsub
// validation error if this host's own validator rejects data.
func (h *Host) PublishTo(ctx context.Context, topic string, data []byte) error {
	t := h.gossipTopic(topic)
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	}
	if len(data) > h.cfg.GossipMaxSize {
		return fmt.Errorf("%w: %d > %d bytes", ErrMessageTooLarge, len(data), h.cfg.GossipMaxSize)
	}
	h.mu.Lock()
	started, closed := h.started, h.closed
	h.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !started:
		return ErrNotStarted
	}
	if err := t.topic.Publish(ctx, data); err != nil {
		return fmt.Errorf("p2p: publish: %w", err)
	}
	return nil
}

// Messages returns the channel on which gossip messages from other peers
// arrive (this host's own publications are not echoed). Order is not
// guaranteed, not even between two messages of one author: pubsub validates
// on several workers. It is closed after
// Close. If the reader falls MessageBuffer messages behind, newer messages
// are dropped and counted in GossipStats.Dropped.
func (h *Host) Messages() <-chan Message { return h.msgs }

// TopicPeers returns the peers known to be subscribed to MeshTopic; nil
// before Start.
func (h *Host) TopicPeers() []peer.ID {
	h.mu.Lock()
	started := h.started
	h.mu.Unlock()
	if !started {
		return nil
	}
	return h.gossip.topics[0].topic.ListPeers()
}

// GossipStats returns the host's gossip counters.
func (h *Host) GossipStats() GossipStats {
	g := &h.gossip
	return GossipStats{Delivered: g.delivered.Load(), Rejected: g.rejected.Load(), Dropped: g.dropped.Load(),
		Throttled: g.throttled.Load(), Overloaded: g.overload.Load(), Unsent: g.unsent.Load()}
}

// deliverLoop moves validated messages from t's subscription to the
// Messages channel without ever blocking on a slow reader.
func (h *Host) deliverLoop(ctx context.Context, t *gossipTopic) {
	self := h.h.ID()
	for {
		msg, err := t.sub.Next(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, pubsub.ErrSubscriptionCancelled) {
				h.log.Warn("gossip subscription ended", "err", err)
			}
			return
		}
		if msg.GetFrom() == self {
			continue
		}
		h.meetAuthor(msg.GetFrom())
		select {
		// Copy: pubsub keeps the message in its relay cache.
		case h.msgs <- Message{Topic: t.name, From: msg.GetFrom(), Data: bytes.Clone(msg.GetData())}:
			h.gossip.delivered.Add(1)
		default:
			if n := h.gossip.dropped.Add(1); n&(n-1) == 0 { // log at powers of two
				h.log.Warn("gossip reader too slow, dropping messages", "dropped", n)
			}
		}
	}
}

// meetAuthorEvery bounds how often gossip from a run peer this host is not
// connected to starts a discovery lookup.
const meetAuthorEvery = 2 * time.Second

// meetAuthor starts a discovery lookup (at most every meetAuthorEvery)
// when gossip arrives, through others, from a run peer this host has no
// connection to: a member that restarted, or one behind a NAT that just got
// a relay address, is then met in seconds rather than at the next periodic
// lookup (which backs off to DiscoveryInterval).
func (h *Host) meetAuthor(from peer.ID) {
	if h.h.Network().Connectedness(from) == network.Connected {
		return
	}
	now := time.Now().UnixNano()
	last := h.gossip.lastMeet.Load()
	if now-last < int64(meetAuthorEvery) || !h.gossip.lastMeet.CompareAndSwap(last, now) {
		return
	}
	kick(h.kickDiscover)
}

// closeMessages closes the Messages channel once; only after every
// deliverLoop has returned (Close waits for it).
func (h *Host) closeMessages() { h.gossip.closeMsgs.Do(func() { close(h.msgs) }) }

// gossipTracer counts the messages pubsub rejects as invalid: unsigned,
// badly signed, carrying unexpected author data, or refused by validate. It
// is called synchronously from pubsub's event loop and must stay cheap.
type gossipTracer struct{ h *Host }

var _ pubsub.RawTracer = gossipTracer{}

// RejectMessage counts invalid messages, and apart the ones dropped for
// load (a full validation queue, a throttled sender); duplicates are not
// counted.
func (t gossipTracer) RejectMessage(msg *pubsub.Message, reason string) {
	switch reason {
	case pubsub.RejectValidationQueueFull, pubsub.RejectValidationThrottled:
		t.h.gossip.overload.Add(1)
	case pubsub.RejectMissingSignature, pubsub.RejectInvalidSignature, pubsub.RejectUnexpectedSignature,
		pubsub.RejectUnexpectedAuthInfo, pubsub.RejectValidationFailed:
		t.h.gossip.rejected.Add(1)
		t.h.log.Debug("rejected gossip message", "reason", reason, "from", msg.GetFrom().ShortString(),
			"via", msg.ReceivedFrom.ShortString(), "bytes", len(msg.GetData()))
	}
}

// DropRPC counts the RPCs pubsub could not queue for a peer.
func (t gossipTracer) DropRPC(*pubsub.RPC, peer.ID) { t.h.gossip.unsent.Add(1) }

// The remaining RawTracer events are not needed.

func (gossipTracer) AddPeer(peer.ID, protocol.ID)             {}
func (gossipTracer) RemovePeer(peer.ID)                       {}
func (gossipTracer) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (gossipTracer) OnClosedOutboundStream(peer.ID)           {}
func (gossipTracer) Join(string)                              {}
func (gossipTracer) Leave(string)                             {}
func (gossipTracer) Graft(peer.ID, string)                    {}
func (gossipTracer) Prune(peer.ID, string)                    {}
func (gossipTracer) ValidateMessage(*pubsub.Message)          {}
func (gossipTracer) DeliverMessage(*pubsub.Message)           {}
func (gossipTracer) DuplicateMessage(*pubsub.Message)         {}
func (gossipTracer) ThrottlePeer(peer.ID)                     {}
func (gossipTracer) RecvRPC(*pubsub.RPC)                      {}
func (gossipTracer) SendRPC(*pubsub.RPC, peer.ID)             {}
func (gossipTracer) UndeliverableMessage(*pubsub.Message)     {}

// authorRate is the per-author budget of topic messages: a token bucket of
// rate messages per second holding at most burst. A message over budget
// still costs a token, down to a debt of one more burst, so an author that
// keeps flooding stays over budget however fast it sends.
type authorRate struct {
	rate, burst float64
	now         func() time.Time

	mu      sync.Mutex
	buckets map[peer.ID]*rateBucket
}

type rateBucket struct {
	tokens float64
	last   time.Time
	warned bool // its first excess was reported
}

// rateVerdict is what authorRate.take says about one message.
type rateVerdict uint8

const (
	rateAccept rateVerdict = iota
	rateIgnore             // over budget
	rateReject             // over budget by a further burst: a flood
)

// maxRateAuthors bounds the buckets kept; idle (full) ones go first.
const maxRateAuthors = 4096

func newAuthorRate(rate float64, burst int, now func() time.Time) *authorRate {
	return &authorRate{rate: rate, burst: float64(burst), now: now, buckets: make(map[peer.ID]*rateBucket)}
}

// take charges one message of p; first is true the first time p is over
// budget, for one log line per author.
func (r *authorRate) take(p peer.ID) (v rateVerdict, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	b := r.buckets[p]
	if b == nil {
		r.evict(now)
		b = &rateBucket{tokens: r.burst, last: now}
		r.buckets[p] = b
	}
	r.refill(b, now)
	b.tokens--
	switch {
	case b.tokens >= 0:
		return rateAccept, false
	case b.tokens > -r.burst:
		v = rateIgnore
	default:
		b.tokens, v = -r.burst, rateReject
	}
	first, b.warned = !b.warned, true
	return v, first
}

func (r *authorRate) refill(b *rateBucket, now time.Time) {
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(r.burst, b.tokens+el*r.rate)
	}
	b.last = now
}

// evict makes room for one more bucket: it drops the full ones (authors
// quiet for long enough to be back at a full burst), else the fullest one,
// so that the busiest authors keep their debt: a flood of new identities
// must not reset a spammer's bucket (an arbitrary one went before, and a
// test caught the busy author evicted about 1 run in 400).
func (r *authorRate) evict(now time.Time) {
	if len(r.buckets) < maxRateAuthors {
		return
	}
	var fullest peer.ID
	most := math.Inf(-1)
	for p, b := range r.buckets {
		if r.refill(b, now); b.tokens >= r.burst {
			delete(r.buckets, p)
		} else if b.tokens > most || b.tokens == most && p < fullest {
			fullest, most = p, b.tokens
		}
	}
	if len(r.buckets) >= maxRateAuthors {
		delete(r.buckets, fullest)
	}
}
