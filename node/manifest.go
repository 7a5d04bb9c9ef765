package node

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Manifest is what every member of a run must agree on, fixed by the node
// that creates the run. Its canonical encoding (Encode: compact JSON, fields
// in this order) is content-addressed: ID, the hex SHA-256 of those bytes, is
// part of the run's identity (gossip topic, DHT key, every stream
// handshake). docs/manifest.md describes the fields and the trust model.
type Manifest struct {
	// Version is the manifest format, ManifestVersion.
	Version int `json:"version"`
	// Run is the run's human name (p2p.CheckRunName).
	Run string `json:"run"`
	// Nonce is 32 random hex digits drawn by the creator: two runs created
	// with the same flags are still two runs.
	Nonce string `json:"genesis_nonce"`
	// Preset is the model preset the creator named, or "" for a model
	// config file; Train.Model is the resolved model either way.
	Preset string `json:"preset"`
	// Tokenizer names the tokenizer of the data ("byte" for byte-level).
	Tokenizer string `json:"tokenizer"`
	// Data is the training mixture: components by name and weight.
	Data []train.MixtureEntry `json:"data"`
	// InnerSteps is H, the inner steps per outer step.
	InnerSteps int `json:"inner_steps"`
	// Train holds the model, batch, sequence length, the inner optimizer
	// and its schedule and the init seed; Worker is always 0.
	Train train.Options `json:"train"`
	// OuterLR and OuterMomentum are the outer optimizer's settings.
	OuterLR       float32 `json:"outer_lr"`
	OuterMomentum float32 `json:"outer_momentum"`
	// WorkerMomentum is each member's momentum of its own pseudo-gradients
	// (Config.WorkerMomentum); absent is 0.
	WorkerMomentum float32 `json:"worker_momentum,omitempty"`
	// Compression is how pseudo-gradients travel.
	Compression Compression `json:"compression"`
	// Averaging is how members combine them: "mean" (the ring) or
	// "robust" (direct scatter, robust owners; docs/robust.md).
	Averaging string `json:"averaging"`
	// Admission says who may join.
	Admission Admission `json:"admission"`
	// MaxWeight is the largest averaging weight (inner steps) a member may
	// claim: H.
	MaxWeight int `json:"max_weight"`
	// MinMembers holds the run's first outer step until this many members
	// agree on a ring: every member, joiners included, holds the first
	// ring to it (a member's own --min-members may raise it for itself).
	// Absent (0) in manifests written before it existed: 1.
	MinMembers int `json:"min_members,omitempty"`
	// CloseFraction is the close rule's work target (Config.CloseFraction):
	// a step closes once its Ready members' inner steps, each counted up to
	// H, sum to this fraction of the members × H. Absent (0), as in
	// manifests written before it existed: every step waits for every
	// member.
	CloseFraction float64 `json:"close_fraction,omitempty"`
}

// minMembers is the run's minimum: MinMembers, 1 when absent.
func (m *Manifest) minMembers() int { return max(m.MinMembers, 1) }

// Compression is the all-reduce's encoding.
type Compression struct {
	Codec         string `json:"codec"` // int8, q4, q2, topk or fp32 (codec.go)
	ErrorFeedback bool   `json:"error_feedback"`
	Shards        int    `json:"shards"` // slices of the vector; part of the codecs' arithmetic
	// The compressed codecs' settings, absent for int8 and fp32: the
	// error-feedback decay β, the owners' result feedback, and codec topk's
	// entries per block, block size and bits per kept value.
	FeedbackDecay  float32 `json:"feedback_decay,omitempty"`
	ResultFeedback bool    `json:"result_feedback,omitempty"`
	TopK           int     `json:"topk,omitempty"`
	TopKBlock      int     `json:"topk_block,omitempty"`
	TopKBits       int     `json:"topk_bits,omitempty"`
}

// Admission is a run's admission policy (docs/manifest.md "Admission").
// Each policy has its own fields and no other; an unknown policy is
// refused by name rather than misread.
type Admission struct {
	// Policy is AdmissionOpen, AdmissionPSK or AdmissionAllowlist.
	Policy string `json:"policy"`
	// PSKCommitment (psk) is PSKCommitment of the run's private network
	// key: 64 hex digits. The key itself is never in the manifest.
	PSKCommitment string `json:"psk_commitment,omitempty"`
	// Creator (allowlist) is the peer id of the node that created the run,
	// which holds its Ed25519 public key: it signs the tickets.
	Creator string `json:"creator,omitempty"`
}

// validate rejects an admission this version cannot enforce.
func (a Admission) validate() error {
	switch a.Policy {
	case AdmissionOpen:
		if a.PSKCommitment != "" || a.Creator != "" {
			return errors.New("admission policy \"open\" has no psk_commitment or creator")
		}
	case AdmissionPSK:
		if !isHex(a.PSKCommitment, 64) || a.Creator != "" {
			return fmt.Errorf("admission policy \"psk\" needs psk_commitment (64 hex digits), not %q, and no creator", a.PSKCommitment)
		}
	case AdmissionAllowlist:
		id, err := peer.Decode(a.Creator)
		if err == nil && id.String() != a.Creator {
			err = errors.New("not in canonical form")
		}
		if err == nil {
			err = p2p.CheckCreator(id)
		}
		if err != nil || a.PSKCommitment != "" {
			return fmt.Errorf("admission policy \"allowlist\" needs the creator's peer id, not %q (%v), and no psk_commitment", a.Creator, err)
		}
	default:
		return fmt.Errorf("admission policy %q is not supported by this version (%s, %s or %s)",
			a.Policy, AdmissionOpen, AdmissionPSK, AdmissionAllowlist)
	}
	return nil
}

// Manifest format constants.
const (
	// ManifestVersion is the format written by this version.
	ManifestVersion = 1
	// MaxManifestSize bounds an encoded manifest, on disk and on the wire.
	MaxManifestSize = p2p.MaxManifestSize
	// ManifestFile is the manifest's file name under the node's home.
	ManifestFile = "manifest.json"
	// DefaultTokenizer is the tokenizer of the embedded corpus.
	DefaultTokenizer = "byte"
	// manifestMaxInnerSteps bounds H (the weight a member may claim).
	manifestMaxInnerSteps = 1 << 16
	// manifestMaxName bounds tokenizer and data names.
	manifestMaxName = 256
	// manifestMaxData bounds the mixture's components.
	manifestMaxData = 256
)

// ErrManifest is wrapped by every error about a manifest's content.
var ErrManifest = errors.New("node: bad run manifest")

// Encode returns the canonical encoding of m.
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	return b, nil
}

// ManifestID returns the id of an encoded manifest: its hex SHA-256.
func ManifestID(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// DecodeManifest parses a manifest from untrusted bytes: at most
// MaxManifestSize, no unknown fields, valid values, and canonical (the bytes
// are exactly Encode of what they decode to, so one run has one id).
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrManifest, len(b), MaxManifestSize)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var m Manifest
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	canon, err := m.Encode()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(canon, b) {
		return nil, fmt.Errorf("%w: not in canonical form", ErrManifest)
	}
	return &m, nil
}

// Validate rejects a manifest this version cannot run.
func (m *Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrManifest, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Version != ManifestVersion:
		return bad("version %d, this node reads %d", m.Version, ManifestVersion)
	case p2p.CheckRunName(m.Run) != nil:
		return bad("%v", p2p.CheckRunName(m.Run))
	case !isHex(m.Nonce, 32):
		return bad("genesis nonce %q: want 32 hex digits", m.Nonce)
	case len(m.Preset) > manifestMaxName || !printable(m.Tokenizer) || len(m.Tokenizer) > manifestMaxName:
		return bad("preset %q or tokenizer %q", m.Preset, m.Tokenizer)
	case m.InnerSteps < 1 || m.InnerSteps > manifestMaxInnerSteps || m.MaxWeight != m.InnerSteps:
		return bad("inner steps %d, max weight %d: want 1..%d and equal", m.InnerSteps, m.MaxWeight, manifestMaxInnerSteps)
	case m.Train.Worker != 0 || m.Train.Validate() != nil:
		return bad("train options: worker %d, %v", m.Train.Worker, m.Train.Validate())
	case !(m.OuterLR > 0 && m.OuterLR <= 10) || !(m.OuterMomentum >= 0 && m.OuterMomentum < 1):
		return bad("outer lr %v, momentum %v", m.OuterLR, m.OuterMomentum)
	case !(m.WorkerMomentum >= 0 && m.WorkerMomentum < 1):
		return bad("worker momentum %v", m.WorkerMomentum)
	case m.Averaging != AveragingMean && m.Averaging != AveragingRobust:
		return bad("averaging %q: want mean or robust", m.Averaging)
	case m.Compression.validate(m.Averaging) != nil:
		return bad("%v", m.Compression.validate(m.Averaging))
	case m.Compression.Shards < 1 || m.Compression.Shards > collective.MaxShards:
		return bad("shards %d: want 1..%d", m.Compression.Shards, collective.MaxShards)
	case m.Admission.validate() != nil:
		return bad("%v", m.Admission.validate())
	case m.MinMembers < 0 || m.MinMembers > mesh.MaxMembers:
		return bad("min members %d: want 1..%d", m.MinMembers, mesh.MaxMembers)
	case !(m.CloseFraction >= 0 && m.CloseFraction <= 1):
		return bad("close fraction %v: want [0, 1]", m.CloseFraction)
	}
	return m.validateData()
}

// validateData checks the mixture.
func (m *Manifest) validateData() error {
	if len(m.Data) < 1 || len(m.Data) > manifestMaxData {
		return fmt.Errorf("%w: %d data sources, want 1..%d", ErrManifest, len(m.Data), manifestMaxData)
	}
	for _, d := range m.Data {
		if d.Name == "" || len(d.Name) > manifestMaxName || !printable(d.Name) ||
			!(d.Weight > 0) || math.IsInf(d.Weight, 0) {
			return fmt.Errorf("%w: data source %q weight %v", ErrManifest, d.Name, d.Weight)
		}
	}
	return nil
}

func isHex(s string, n int) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == n && strings.ToLower(s) == s
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return false
		}
	}
	return true
}

// newNonce draws a genesis nonce.
func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("node: genesis nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ManifestDiff lists the fields in which two manifests differ, as
// "path = value" of b (e.g. "inner_steps = 20"), sorted; only paths with one
// of the prefixes count when prefixes are given.
func ManifestDiff(a, b *Manifest, prefixes ...string) []string {
	fa, fb := flatten(a), flatten(b)
	var out []string
	for k, vb := range fb {
		if fa[k] != vb && hasPrefix(k, prefixes) {
			out = append(out, k+" = "+vb)
		}
	}
	for k := range fa {
		if _, ok := fb[k]; !ok && hasPrefix(k, prefixes) {
			out = append(out, k+" = (absent)")
		}
	}
	sort.Strings(out)
	return out
}

func hasPrefix(k string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if k == p || strings.HasPrefix(k, p+".") {
			return true
		}
	}
	return false
}

// flatten maps each leaf of m's JSON to its dotted path ("train.lr").
func flatten(m *Manifest) map[string]string {
	b, _ := json.Marshal(m)
	var v any
	_ = json.Unmarshal(b, &v)
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(strings.TrimPrefix(path+"."+k, "."), e)
			}
		default:
			s, _ := json.Marshal(x)
			out[path] = string(s)
		}
	}
	walk("", v)
	return out
}

// readManifestFile reads and decodes <home>/manifest.json, returning nil
// and no error when there is none.
func readManifestFile(home string) (*Manifest, string, error) {
	path := filepath.Join(home, ManifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("node: read %s: %w", path, err)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return m, ManifestID(b), nil
}

// writeManifestFile writes the canonical bytes to <home>/manifest.json
// durably (writeFileAtomic).
func writeManifestFile(home string, b []byte) error {
	if err := writeFileAtomic(filepath.Join(home, ManifestFile), b); err != nil {
		return fmt.Errorf("node: write manifest: %w", err)
	}
	return nil
}

// writeFileAtomic writes b to path durably: a temp file beside it,
// fsynced, then renamed over path, so that a crash leaves the old file or
// the new one.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}
