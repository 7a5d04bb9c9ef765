package p2p

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ManifestProtocolID is the stream protocol by which a joiner gets the run
// manifest from a member. The joiner opens a stream and reads one frame
// (ReadFrame); nothing flows the other way:
//
//	member → joiner  manifestMsg  id [32] (SHA-256 of the bytes), manifest bytes
//
// The joiner checks that the bytes hash to the id, and to the id it pinned
// if it pinned one; what the bytes mean is the node's business.
const ManifestProtocolID = "/intellect/manifest/1.0.0"

// Size limits of ManifestProtocolID.
const (
	// MaxManifestSize bounds an encoded run manifest.
	MaxManifestSize = 64 << 10
	// manifestMaxFrame is the largest frame payload read.
	manifestMaxFrame = sha256.Size + MaxManifestSize
	// manifestTimeout bounds one exchange.
	manifestTimeout = 10 * time.Second
)

// manifestMsg is the only frame type of ManifestProtocolID. Append only.
const manifestMsg uint8 = 1

// Errors of the manifest exchange.
var (
	// ErrManifestMismatch: the bytes a peer sent do not hash to the id it
	// claimed, or not to the id the operator pinned.
	ErrManifestMismatch = errors.New("p2p: run manifest does not match its id")
	// ErrManifestProtocol: a malformed or oversized manifest frame.
	ErrManifestProtocol = errors.New("p2p: manifest protocol violation")
)

// CheckRunName reports whether name is a valid run name: 1-64 bytes of
// [A-Za-z0-9._-], starting with a letter or digit.
func CheckRunName(name string) error {
	if len(name) > maxRunName || !runNamePattern.MatchString(name) {
		return fmt.Errorf("run name %q: want 1-%d of [A-Za-z0-9._-], starting with a letter or digit", name, maxRunName)
	}
	return nil
}

// ManifestServer answers ManifestProtocolID with one fixed manifest.
type ManifestServer struct {
	h    host.Host
	id   [32]byte
	data []byte
	log  *slog.Logger
}

// ServeManifest registers ManifestProtocolID on h, serving data (an encoded
// manifest; it must not be modified afterwards). Close removes the handler.
func ServeManifest(h host.Host, data []byte, log *slog.Logger) (*ManifestServer, error) {
	if len(data) == 0 || len(data) > MaxManifestSize {
		return nil, fmt.Errorf("p2p: serve manifest of %d bytes (limit %d)", len(data), MaxManifestSize)
	}
	if log == nil {
		log = slog.Default()
	}
	s := &ManifestServer{h: h, id: sha256.Sum256(data), data: data, log: log.With("system", "manifest")}
	h.SetStreamHandler(ManifestProtocolID, s.handle)
	return s, nil
}

// handle writes the manifest frame and closes the stream.
func (s *ManifestServer) handle(st network.Stream) {
	_ = st.SetDeadline(time.Now().Add(manifestTimeout))
	if err := WriteFrame(st, manifestMsg, append(s.id[:], s.data...)); err != nil {
		s.log.Debug("manifest not sent", "peer", st.Conn().RemotePeer(), "err", err)
		_ = st.Reset()
		return
	}
	_ = st.Close()
}

// Close removes the handler; streams being served finish on their own
// deadline.
func (s *ManifestServer) Close() { s.h.RemoveStreamHandler(ManifestProtocolID) }

// FetchManifest asks peer p for its run manifest and returns the bytes and
// their id (hex SHA-256). pin, if not empty, is the id (64 hex digits) the
// operator expects: another manifest is ErrManifestMismatch. The caller
// must already be connected to p or have its addresses in the peerstore.
func FetchManifest(ctx context.Context, h host.Host, p peer.ID, pin string) (data []byte, id string, err error) {
	ctx, cancel := context.WithTimeout(ctx, manifestTimeout)
	defer cancel()
	st, err := h.NewStream(ctx, p, ManifestProtocolID)
	if err != nil {
		return nil, "", fmt.Errorf("p2p: open %s to %s: %w", ManifestProtocolID, p, err)
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	typ, payload, err := ReadFrame(st, manifestMaxFrame, nil)
	if err != nil {
		_ = st.Reset()
		return nil, "", fmt.Errorf("p2p: manifest from %s: %w", p, err)
	}
	if typ != manifestMsg {
		_ = st.Reset()
		return nil, "", fmt.Errorf("%w: frame type %d from %s", ErrManifestProtocol, typ, p)
	}
	data, id, err = DecodeManifestFrame(payload)
	if err != nil {
		return nil, "", fmt.Errorf("manifest from %s: %w", p, err)
	}
	if pin != "" && id != pin {
		return nil, "", fmt.Errorf("%w: %s serves run manifest %s, pinned %s", ErrManifestMismatch, p, id, pin)
	}
	return data, id, nil
}

// DecodeManifestFrame splits a manifest frame payload from a peer into the
// manifest bytes and their id, verifying that the bytes hash to the id
// claimed.
func DecodeManifestFrame(p []byte) (data []byte, id string, err error) {
	if len(p) <= sha256.Size || len(p) > manifestMaxFrame {
		return nil, "", fmt.Errorf("%w: frame of %d bytes (manifest limit %d)", ErrManifestProtocol, len(p), MaxManifestSize)
	}
	data = p[sha256.Size:]
	if sum := sha256.Sum256(data); string(sum[:]) != string(p[:sha256.Size]) {
		return nil, "", fmt.Errorf("%w: claims %x, the bytes hash to %x", ErrManifestMismatch, p[:sha256.Size], sum)
	}
	return data, hex.EncodeToString(p[:sha256.Size]), nil
}

// runKey is the run's name joined with its manifest id, if any: a run name
// has no '/', so two (name, id) pairs never give the same key.
func runKey(run, id string) string {
	if id == "" {
		return run
	}
	return run + "/" + id
}

// checkRunID accepts "" or 64 lower-case hex digits.
func checkRunID(id string) error {
	if id == "" {
		return nil
	}
	if _, err := hex.DecodeString(id); err != nil || len(id) != 2*sha256.Size || strings.ToLower(id) != id {
		return fmt.Errorf("run id %q: want %d lower-case hex digits", id, 2*sha256.Size)
	}
	return nil
}

// SetRun sets Config.Run and Config.RunID: a joiner learns them from its
// bootstrap peers after New. Only before Start.
func (h *Host) SetRun(name, id string) error {
	if err := CheckRunName(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := checkRunID(id); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		return ErrAlreadyStarted
	}
	h.cfg.Run, h.cfg.RunID = name, id
	return nil
}

// RunID returns the run manifest id the host serves ("" if none).
func (h *Host) RunID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cfg.RunID
}
