package ckpt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// ProtocolID is the stream protocol of live checkpoint transfer. A joiner
// opens one stream per donor, asks for the donor's manifest, then requests
// chunks of that manifest's snapshot on the same stream, several in flight.
// The donor pins the snapshot of its manifest for the life of the stream.
//
// Frames (p2p.WriteFrame/p2p.ReadFrame), all integers big-endian:
//
//	joiner → donor  ckptMsgManifestReq  step u64, model hash [32], run [32]
//	donor → joiner  ckptMsgManifest     status u8, step u64, model hash [32],
//	                                    chunk size u32, total bytes u64,
//	                                    root [32], n u32, n × chunk SHA-256 [32]
//	joiner → donor  ckptMsgChunkReq     chunk index u32
//	donor → joiner  ckptMsgChunk        the chunk's bytes (answers in request order)
//	donor → joiner  ckptMsgError        code u8, text (at most ckptMaxErrorText bytes)
//
// root is the SHA-256 of the n chunk hashes concatenated: a commitment to
// every byte of the payload. A manifest for another step or model hash than
// requested has status ckptStatusMismatch and no chunk hashes; a request
// naming another run (the run manifest's id) gets ckptStatusOtherRun and
// nothing else, so a node of another manifest is never a donor.
const ProtocolID = "/intellect/ckpt/1.0.0"

// UpdateProtocolID is the same protocol for a step's update: its container
// (EncodeUpdate) holds the averaged pseudo-gradient Δ̄ of outer step t,
// packed, where a snapshot holds θ₀ and the momentum, and is named by t and
// the hash of the model G_{t+1} that Δ̄ makes of G_t. A member one step
// behind fetches it instead of the whole snapshot (about one byte a
// parameter against eight),
// applies the outer step itself and checks the model it made against the
// hash: the fetcher does not check the θ₀ region (ServeConfig.Update,
// FetchConfig.Update).
const UpdateProtocolID = "/intellect/ckpt-update/2.0.0"

// protocolOf is the protocol of snapshots (update false) or updates.
func protocolOf(update bool) protocol.ID {
	if update {
		return UpdateProtocolID
	}
	return ProtocolID
}

// Size limits of the checkpoint protocol, checked before allocating.
const (
	// MinChunkSize and MaxChunkSize bound a manifest's chunk size.
	MinChunkSize = 64 << 10
	MaxChunkSize = 16 << 20
	// ckptMaxChunks bounds the chunk count of a manifest (8 MiB of hashes):
	// 256 GiB at the default 1 MiB chunks.
	ckptMaxChunks = 1 << 18
	// ckptManifestFixed is the size of a manifest without its chunk hashes.
	ckptManifestFixed = 1 + 8 + 32 + 4 + 8 + 32 + 4
	// ckptMaxManifest is the largest manifest frame payload.
	ckptMaxManifest = ckptManifestFixed + 32*ckptMaxChunks
	// ckptMaxRequest is the largest frame a donor reads.
	ckptMaxRequest = 128
	// ckptMaxErrorText bounds the text of an error frame.
	ckptMaxErrorText = 200
)

// Message types of ProtocolID. Append only, never renumber.
const (
	ckptMsgManifestReq uint8 = 1
	ckptMsgManifest    uint8 = 2
	ckptMsgChunkReq    uint8 = 3
	ckptMsgChunk       uint8 = 4
	ckptMsgError       uint8 = 5
)

// Manifest status values. Append only.
const (
	ckptStatusOK       uint8 = 0 // the donor has the wanted step and hash
	ckptStatusMismatch uint8 = 1 // the donor has another step or hash
	ckptStatusNone     uint8 = 2 // the donor has no snapshot yet
	ckptStatusOtherRun uint8 = 3 // the donor belongs to another run
)

// Error codes of ckptMsgError. Append only.
const (
	ckptErrBusy uint8 = 1 // the donor serves its maximum of transfers
)

// ErrProtocol is returned (wrapped) for a malformed or unexpected message
// of the checkpoint protocol.
var ErrProtocol = errors.New("p2p: checkpoint protocol violation")

// ckptManifest describes a snapshot as a donor serves it.
type ckptManifest struct {
	status    uint8
	step      uint64
	modelHash [32]byte
	chunkSize int
	total     int64
	root      [32]byte
	chunks    [][32]byte
}

// numChunks is the number of chunks of total bytes at chunkSize.
func ckptNumChunks(total int64, chunkSize int) int {
	return int((total + int64(chunkSize) - 1) / int64(chunkSize))
}

// ckptRoot is the SHA-256 of the concatenated chunk hashes.
func ckptRoot(chunks [][32]byte) [32]byte {
	h := sha256.New()
	for i := range chunks {
		h.Write(chunks[i][:])
	}
	var r [32]byte
	h.Sum(r[:0])
	return r
}

// chunkRange returns the byte range of chunk i.
func (m *ckptManifest) chunkRange(i int) (off, end int64) {
	off = int64(i) * int64(m.chunkSize)
	return off, min(off+int64(m.chunkSize), m.total)
}

// key identifies the content a manifest describes; donors whose manifests
// have equal keys serve identical bytes (or are caught lying chunk by chunk).
func (m *ckptManifest) key() string {
	var b [32 + 32 + 4 + 8]byte
	copy(b[:], m.modelHash[:])
	copy(b[32:], m.root[:])
	binary.BigEndian.PutUint32(b[64:], uint32(m.chunkSize))
	binary.BigEndian.PutUint64(b[68:], uint64(m.total))
	return string(b[:])
}

// encode serializes m as a ckptMsgManifest payload.
func (m *ckptManifest) encode() []byte {
	b := make([]byte, ckptManifestFixed+32*len(m.chunks))
	b[0] = m.status
	binary.BigEndian.PutUint64(b[1:], m.step)
	copy(b[9:], m.modelHash[:])
	binary.BigEndian.PutUint32(b[41:], uint32(m.chunkSize))
	binary.BigEndian.PutUint64(b[45:], uint64(m.total))
	copy(b[53:], m.root[:])
	binary.BigEndian.PutUint32(b[85:], uint32(len(m.chunks)))
	for i := range m.chunks {
		copy(b[ckptManifestFixed+32*i:], m.chunks[i][:])
	}
	return b
}

// ckptDecodeManifest parses and validates a ckptMsgManifest payload: chunk
// size within limits, chunk count matching total and chunk size, root
// matching the chunk hashes. The count is checked against len(p) before the
// hash list is allocated.
func ckptDecodeManifest(p []byte) (*ckptManifest, error) {
	if len(p) < ckptManifestFixed {
		return nil, fmt.Errorf("%w: manifest of %d bytes", ErrProtocol, len(p))
	}
	m := &ckptManifest{status: p[0], step: binary.BigEndian.Uint64(p[1:])}
	copy(m.modelHash[:], p[9:41])
	cs := binary.BigEndian.Uint32(p[41:])
	total := binary.BigEndian.Uint64(p[45:])
	copy(m.root[:], p[53:85])
	n := binary.BigEndian.Uint32(p[85:])
	if uint64(len(p)-ckptManifestFixed) != 32*uint64(n) {
		return nil, fmt.Errorf("%w: manifest announces %d chunk hashes in %d bytes", ErrProtocol, n, len(p))
	}
	if m.status != ckptStatusOK {
		if m.status > ckptStatusOtherRun || n != 0 || cs != 0 || total != 0 || m.root != [32]byte{} {
			return nil, fmt.Errorf("%w: manifest status %d with %d chunks", ErrProtocol, m.status, n)
		}
		return m, nil
	}
	if cs < MinChunkSize || cs > MaxChunkSize || total < ckptHeaderSize || n > ckptMaxChunks ||
		total > uint64(n)*uint64(cs) || total <= uint64(n-1)*uint64(cs) {
		return nil, fmt.Errorf("%w: manifest chunk size %d, %d chunks, %d bytes", ErrProtocol, cs, n, total)
	}
	m.chunkSize, m.total = int(cs), int64(total)
	m.chunks = make([][32]byte, n)
	for i := range m.chunks {
		copy(m.chunks[i][:], p[ckptManifestFixed+32*i:])
	}
	if r := ckptRoot(m.chunks); r != m.root {
		return nil, fmt.Errorf("%w: manifest root does not match its chunk hashes", ErrProtocol)
	}
	return m, nil
}

// ckptBuildManifest hashes the chunks of a snapshot.
func ckptBuildManifest(s *Snapshot) (*ckptManifest, error) {
	cs := s.ChunkSize
	if cs == 0 {
		cs = DefaultChunkSize
	}
	h, err := ckptParseHash(s.Hash)
	if err != nil {
		return nil, err
	}
	total := int64(len(s.Data))
	if cs < MinChunkSize || cs > MaxChunkSize || total < ckptHeaderSize ||
		ckptNumChunks(total, cs) > ckptMaxChunks {
		return nil, fmt.Errorf("%w: chunk size %d for %d bytes", ErrSnapshot, cs, total)
	}
	m := &ckptManifest{status: ckptStatusOK, step: s.Step, modelHash: h, chunkSize: cs, total: total}
	m.chunks = make([][32]byte, ckptNumChunks(total, cs))
	for i := range m.chunks {
		off, end := m.chunkRange(i)
		m.chunks[i] = sha256.Sum256(s.Data[off:end])
	}
	m.root = ckptRoot(m.chunks)
	return m, nil
}

// ckptParseHash decodes a model hash written as 64 hex digits.
func ckptParseHash(s string) ([32]byte, error) {
	var h [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return h, fmt.Errorf("%w: model hash %q is not 64 hex digits", ErrSnapshot, s)
	}
	copy(h[:], b)
	return h, nil
}

// ckptManifestReqSize is the size of a ckptMsgManifestReq payload.
const ckptManifestReqSize = 8 + 32 + 32

// ckptEncodeManifestReq builds a ckptMsgManifestReq payload.
func ckptEncodeManifestReq(step uint64, hash, run [32]byte) []byte {
	b := make([]byte, ckptManifestReqSize)
	binary.BigEndian.PutUint64(b, step)
	copy(b[8:], hash[:])
	copy(b[40:], run[:])
	return b
}

// ckptDecodeManifestReq parses a ckptMsgManifestReq payload.
func ckptDecodeManifestReq(p []byte) (step uint64, hash, run [32]byte, err error) {
	if len(p) != ckptManifestReqSize {
		return 0, hash, run, fmt.Errorf("%w: manifest request of %d bytes", ErrProtocol, len(p))
	}
	copy(hash[:], p[8:])
	copy(run[:], p[40:])
	return binary.BigEndian.Uint64(p), hash, run, nil
}

// ckptEncodeChunkReq builds a ckptMsgChunkReq payload.
func ckptEncodeChunkReq(index int) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(index))
}

// ckptDecodeChunkReq parses a ckptMsgChunkReq payload.
func ckptDecodeChunkReq(p []byte) (int, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("%w: chunk request of %d bytes", ErrProtocol, len(p))
	}
	return int(binary.BigEndian.Uint32(p)), nil
}

// ckptEncodeError builds a ckptMsgError payload, truncating text.
func ckptEncodeError(code uint8, text string) []byte {
	if len(text) > ckptMaxErrorText {
		text = text[:ckptMaxErrorText]
	}
	return append([]byte{code}, text...)
}

// ckptDecodeError parses a ckptMsgError payload. The text is sanitized to
// printable ASCII before it reaches a log.
func ckptDecodeError(p []byte) (code uint8, text string, err error) {
	if len(p) < 1 || len(p) > 1+ckptMaxErrorText {
		return 0, "", fmt.Errorf("%w: error frame of %d bytes", ErrProtocol, len(p))
	}
	t := bytes.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, p[1:])
	return p[0], string(t), nil
}
