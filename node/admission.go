package node

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/intellect-node/intellect-node/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// Admission policies (Manifest.Admission.Policy, Config.Admission);
// docs/manifest.md "Admission".
const (
	// AdmissionOpen lets anyone who knows the run join.
	AdmissionOpen = "open"
	// AdmissionPSK makes the run a private network: only nodes holding its
	// 32-byte pre-shared key can connect to its members at all. The
	// manifest holds a commitment to the key (PSKCommitment), not the key.
	AdmissionPSK = "psk"
	// AdmissionAllowlist admits the run's creator and the peers it issued a
	// ticket to (IssueTicket); the manifest names the creator's key.
	AdmissionAllowlist = "allowlist"
)

// Files of admission under a node's home.
const (
	// PSKFile is where a creator of a psk run without --psk-file writes the
	// run's key, and where any node looks for one without --psk-file.
	PSKFile = "swarm.key"
	// TicketFile is where a node looks for its admission ticket without
	// --ticket.
	TicketFile = "admission.ticket"
	// maxAdmissionFile bounds a key or ticket file read.
	maxAdmissionFile = 4 << 10
	// pskDomain separates the key's commitment from any other hash of it.
	pskDomain = "intellect-node/psk-commitment/v1\x00"
)

// credentials are what a node joins its run with.
type credentials struct {
	psk     []byte // the private network key (psk runs), read from pskPath
	pskPath string
	ticket  []byte // this node's encoded admission ticket (allowlist runs; nil for the creator)
}

// ErrAdmission is wrapped by every error about this node's admission to
// its run: a missing or wrong key, a missing or invalid ticket.
var ErrAdmission = errors.New("node: not admitted to the run")

// PSKCommitment is what a psk run's manifest holds instead of its key: the
// hex SHA-256 of a domain tag and the key. A node given another key sees
// the mismatch before it joins; the key cannot be recovered from it (it is
// 256 random bits).
func PSKCommitment(key []byte) string {
	s := sha256.Sum256(append([]byte(pskDomain), key...))
	return hex.EncodeToString(s[:])
}

// NewPSK draws a private network key.
func NewPSK() ([]byte, error) {
	k := make([]byte, p2p.PSKSize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("node: new key: %w", err)
	}
	return k, nil
}

// EncodePSK writes key in the swarm.key format of go-libp2p and IPFS
// private networks, base16: "/key/swarm/psk/1.0.0/", "/base16/", the key
// in hex, one per line. An IPFS swarm.key (base16, base64 or bin) is read
// as well.
func EncodePSK(key []byte) []byte {
	return fmt.Appendf(nil, "/key/swarm/psk/1.0.0/\n/base16/\n%x\n", key)
}

// WritePSKFile writes a new key file at path, mode 0600; it never replaces
// an existing file.
func WritePSKFile(path string, key []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("node: write key: %w", err)
	}
	_, err = f.Write(EncodePSK(key))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("node: write key %s: %w", path, err)
	}
	return nil
}

// readPSKFile reads a swarm.key file.
func readPSKFile(path string) ([]byte, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	k, err := pnet.DecodeV1PSK(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a swarm.key file (/key/swarm/psk/1.0.0/, /base16/, 64 hex digits): %v",
			ErrBadConfig, path, err)
	}
	return k, nil
}

// readSmall reads a file of at most maxAdmissionFile bytes.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAdmissionFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxAdmissionFile {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrBadConfig, path, maxAdmissionFile)
	}
	return b, nil
}

// loadPSK finds this node's private network key before its host starts:
// Config.PSKFile, else <home>/swarm.key if there is one. A creator of a
// psk run (--admission psk, no --bootstrap, no manifest yet) without a key
// gets a new one written to <home>/swarm.key. It returns nil without a key.
func (n *Node) loadPSK() error {
	path := n.cfg.PSKFile
	if path == "" {
		path = filepath.Join(n.cfg.Home, PSKFile)
	}
	k, err := readPSKFile(path)
	switch {
	case err == nil:
		n.cred.psk, n.cred.pskPath = k, path
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	case n.cfg.PSKFile != "":
		return fmt.Errorf("%w: --psk-file: %v", ErrBadConfig, err)
	case n.cfg.Admission != AdmissionPSK:
		return nil
	}
	if _, err := os.Stat(filepath.Join(n.cfg.Home, ManifestFile)); err == nil || len(n.cfg.Bootstrap) > 0 {
		return fmt.Errorf("%w: --admission psk: a member of a private run needs its key: give --psk-file "+
			"(the run's creator wrote it to <its home>/%s)", ErrAdmission, PSKFile)
	}
	if k, err = NewPSK(); err != nil {
		return err
	}
	if err := WritePSKFile(path, k); err != nil {
		return err
	}
	n.cred.psk, n.cred.pskPath = k, path
	n.log.Info("created the private run's key: give it to every member (--psk-file), keep it secret", "file", path)
	return nil
}

// pnetHint explains a failed security handshake, which is how a peer of
// another private network, or of none, looks: pnet scrambles the bytes and
// the handshake cannot start. libp2p's upgrader has no error value for it,
// only this text.
func (n *Node) pnetHint(err error) string {
	switch {
	case !strings.Contains(err.Error(), "failed to negotiate security protocol"):
		return ""
	case n.cred.psk != nil:
		return fmt.Sprintf(" (this node uses the private network key %s: a peer with another key, or with none, fails like this)", n.cred.pskPath)
	}
	return " (if the run is private, admission psk, give its key with --psk-file)"
}

// admission returns the admission a creator writes into a new manifest.
func (n *Node) admission() Admission {
	switch n.cfg.Admission {
	case AdmissionPSK:
		return Admission{Policy: AdmissionPSK, PSKCommitment: PSKCommitment(n.cred.psk)}
	case AdmissionAllowlist:
		return Admission{Policy: AdmissionAllowlist, Creator: n.host.ID().String()}
	}
	return Admission{Policy: AdmissionOpen}
}

// checkAdmission checks that this node may join the run of rm: the right
// key for a psk run (and no key for another), a valid ticket for an
// allowlist run unless it is the creator. It keeps the ticket for the host.
func (n *Node) checkAdmission(rm *runManifest) error {
	adm := rm.m.Admission
	if n.cred.psk != nil && adm.Policy != AdmissionPSK {
		return fmt.Errorf("%w: the private network key %s is for psk runs, and run manifest %s admits by policy %q "+
			"(remove the key, or give another --home)", ErrBadConfig, n.cred.pskPath, short(rm.id), adm.Policy)
	}
	switch adm.Policy {
	case AdmissionPSK:
		if n.cred.psk == nil {
			return fmt.Errorf("%w: run manifest %s is private (admission psk): give its key with --psk-file", ErrAdmission, short(rm.id))
		}
		if got := PSKCommitment(n.cred.psk); got != adm.PSKCommitment {
			return fmt.Errorf("%w: the key in %s is not the run's: run manifest %s commits to a key hashing to %s…, this one hashes to %s…",
				ErrAdmission, n.cred.pskPath, short(rm.id), adm.PSKCommitment[:12], got[:12])
		}
	case AdmissionAllowlist:
		return n.loadTicket(rm)
	}
	return nil
}

// loadTicket reads and checks this node's ticket for an allowlist run;
// the creator needs none.
func (n *Node) loadTicket(rm *runManifest) error {
	creator, _ := peer.Decode(rm.m.Admission.Creator) // checked by Validate
	self := n.host.ID()
	if self == creator {
		return nil
	}
	path := n.cfg.TicketFile
	if path == "" {
		path = filepath.Join(n.cfg.Home, TicketFile)
	}
	b, err := readSmall(path)
	switch {
	case err == nil:
	case !errors.Is(err, os.ErrNotExist) || n.cfg.TicketFile != "":
		return fmt.Errorf("%w: --ticket: %v", ErrBadConfig, err)
	case n.cfg.skipTicketCheck:
		return nil // a test's intruder, without a ticket
	default:
		return fmt.Errorf("%w: run manifest %s admits by ticket (allowlist) and this node has none: "+
			"ask the run's creator to run `intellect-node admit --peer %s` and start with --ticket FILE", ErrAdmission, short(rm.id), self)
	}
	t, err := p2p.ParseTicket(b)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrAdmission, path, err)
	}
	if err := t.Verify(creator, rm.key, self, time.Now()); err != nil && !n.cfg.skipTicketCheck {
		return fmt.Errorf("%w: %s does not admit this node (%s) to run manifest %s: %w", ErrAdmission, path, self, short(rm.id), err)
	}
	n.cred.ticket = t.Encode()
	return nil
}

// setAdmission has the host admit by ticket in an allowlist run.
func (n *Node) setAdmission(rm *runManifest) error {
	if rm.m.Admission.Policy != AdmissionAllowlist {
		return nil
	}
	creator, _ := peer.Decode(rm.m.Admission.Creator)
	return n.host.SetAdmission(p2p.Admission{Run: rm.key, Creator: creator, Ticket: n.cred.ticket})
}

// IssueTicket is the `admit` command: on the run creator's home, it signs a
// ticket admitting p to the home's run (an allowlist run this home
// created) for ttl (0: for good), and returns it with the manifest.
func IssueTicket(home string, p peer.ID, ttl time.Duration) (*p2p.Ticket, *Manifest, error) {
	m, id, err := readManifestFile(home)
	switch {
	case err != nil:
		return nil, nil, err
	case m == nil:
		return nil, nil, fmt.Errorf("%w: %s has no run manifest: run admit on the home of the run's creator", ErrBadConfig, home)
	case m.Admission.Policy != AdmissionAllowlist:
		return nil, nil, fmt.Errorf("%w: run %s (manifest %s) admits by policy %q, not by ticket", ErrBadConfig, m.Run, short(id), m.Admission.Policy)
	case ttl < 0:
		return nil, nil, fmt.Errorf("%w: --expires %v", ErrBadConfig, ttl)
	}
	if err := p.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: --peer %q: %v", ErrBadConfig, p, err)
	}
	key, err := creatorKey(home, m)
	if err != nil {
		return nil, nil, err
	}
	var exp time.Time
	if ttl > 0 {
		exp = time.Now().Add(ttl)
	}
	t, err := p2p.IssueTicket(key, manifestKey(id), p, exp)
	return t, m, err
}

// creatorKey loads the identity key of home and checks that it is the
// manifest's creator.
func creatorKey(home string, m *Manifest) (crypto.PrivKey, error) {
	if _, err := os.Stat(filepath.Join(home, p2p.IdentityFile)); err != nil {
		return nil, fmt.Errorf("node: %s has no node identity: %w", home, err)
	}
	key, _, err := p2p.LoadOrCreateIdentity(home)
	if err != nil {
		return nil, err
	}
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if self.String() != m.Admission.Creator {
		return nil, fmt.Errorf("%w: %s is node %s, and run %s was created by %s: only its creator issues tickets",
			ErrBadConfig, home, self, m.Run, m.Admission.Creator)
	}
	return key, nil
}
