package scatter

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p"
)

// AuditProtocolID is the spot check of an owner (docs/robust.md, "Audit"):
// an auditor asks the owner of a segment of a finished attempt for the
// members' messages of one chunk as the owner combined them, and
// recomputes the owner's result (collective.AuditChunk). Frames:
//
//	auditor → owner  msgAuditRequest  run manifest id [32]byte, shard u16,
//	                                  segment u16, chunk u32, attempt id
//	                                  length u8, attempt id
//	owner → auditor  msgAuditInputs   count u16, then per member: length
//	                                  u32, chunk message
//	                 or msgAuditRefused  a reason (UTF-8, ≤ 256 bytes)
//
// One request per stream.
const AuditProtocolID = "/intellect/scatter-audit/1.0.0"

const (
	msgAuditRequest uint8 = 16
	msgAuditInputs  uint8 = 17
	msgAuditRefused uint8 = 18

	auditRequestFixed = 32 + 2 + 2 + 4 + 1
	maxAuditRequest   = auditRequestFixed + MaxIDLen
	maxAuditReason    = 256
	// keptAttempts is how many finished attempts an owner keeps for audits.
	keptAttempts = 2
)

// ErrAuditRefused is wrapped when an owner refuses an audit (it no longer
// holds the attempt, or never owned that segment).
var ErrAuditRefused = fmt.Errorf("p2p: audit refused")

// auditRequest names one chunk of one segment of one attempt.
type auditRequest struct {
	run                   [32]byte
	shard, segment, chunk int
	id                    string
}

func (r auditRequest) encode() []byte {
	b := make([]byte, 0, auditRequestFixed+len(r.id))
	b = append(b, r.run[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(r.shard))
	b = binary.BigEndian.AppendUint16(b, uint16(r.segment))
	b = binary.BigEndian.AppendUint32(b, uint32(r.chunk))
	b = append(b, byte(len(r.id)))
	return append(b, r.id...)
}

func decodeAuditRequest(p []byte) (auditRequest, error) {
	var r auditRequest
	if len(p) < auditRequestFixed || len(p) != auditRequestFixed+int(p[auditRequestFixed-1]) {
		return r, fmt.Errorf("%w: audit request of %d bytes", ErrProtocol, len(p))
	}
	copy(r.run[:], p)
	r.shard = int(binary.BigEndian.Uint16(p[32:]))
	r.segment = int(binary.BigEndian.Uint16(p[34:]))
	r.chunk = int(binary.BigEndian.Uint32(p[36:]))
	r.id = string(p[auditRequestFixed:])
	if r.id == "" {
		return r, fmt.Errorf("%w: audit request without an attempt id", ErrProtocol)
	}
	return r, nil
}

func encodeAuditInputs(msgs [][]byte) []byte {
	n := 2
	for _, m := range msgs {
		n += 4 + len(m)
	}
	b := make([]byte, 0, n)
	b = binary.BigEndian.AppendUint16(b, uint16(len(msgs)))
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
		b = append(b, m...)
	}
	return b
}

// decodeAuditInputs splits an owner's answer into k messages (sub-slices
// of p).
func decodeAuditInputs(p []byte, k int) ([][]byte, error) {
	if len(p) < 2 || int(binary.BigEndian.Uint16(p)) != k {
		return nil, fmt.Errorf("%w: audit answer for another number of members", ErrProtocol)
	}
	p = p[2:]
	out := make([][]byte, k)
	for i := range out {
		if len(p) < 4 {
			return nil, fmt.Errorf("%w: audit answer cut at member %d", ErrProtocol, i)
		}
		n := binary.BigEndian.Uint32(p)
		if uint64(n) > uint64(len(p)-4) || n > collective.MaxChunkMsgSize {
			return nil, fmt.Errorf("%w: audit answer: member %d's message of %d bytes", ErrProtocol, i, n)
		}
		out[i], p = p[4:4+n], p[4+n:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the audit answer", ErrProtocol, len(p))
	}
	return out, nil
}

// keptAttempt is what an owner keeps of one finished attempt.
type keptAttempt struct {
	id      string
	reports []collective.SegmentReport
}

// Keep stores the reports of the segments this node owned in attempt id
// (with their Inputs: collective.ScatterConfig.Audit) so that auditors can
// check them; the last keptAttempts attempts are kept.
func (svc *Service) Keep(id string, reports []collective.SegmentReport) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	svc.kept = append(svc.kept, keptAttempt{id: id, reports: reports})
	if len(svc.kept) > keptAttempts {
		svc.kept = svc.kept[len(svc.kept)-keptAttempts:]
	}
	if svc.keptWake != nil {
		close(svc.keptWake)
		svc.keptWake = nil
	}
}

// keepWait is how long an audit request for an attempt this node is
// still running (or has just finished, not yet kept) waits for Keep: an
// auditor may finish the attempt before the owner does.
const keepWait = 10 * time.Second

// waitInputs returns chunkInputs(r), waiting up to keepWait while r's
// attempt is open or finished but not kept yet, and the service open
// (Close wakes it: a closed node leaves no handler behind).
func (svc *Service) waitInputs(r auditRequest) ([][]byte, string) {
	deadline := time.NewTimer(keepWait)
	defer deadline.Stop()
	for {
		in, why := svc.chunkInputs(r)
		if in != nil || why != whyNotKept {
			return in, why
		}
		svc.mu.Lock()
		pending := (svc.attempts[r.id] != nil || svc.done[r.id]) && !svc.closed
		if svc.keptWake == nil {
			svc.keptWake = make(chan struct{})
		}
		wake := svc.keptWake
		svc.mu.Unlock()
		if !pending {
			return nil, why
		}
		select {
		case <-wake:
		case <-deadline.C:
			return nil, why
		}
	}
}

// chunkInputs returns the kept inputs of one chunk, or why not.
func (svc *Service) chunkInputs(r auditRequest) ([][]byte, string) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, a := range svc.kept {
		if a.id != r.id {
			continue
		}
		for i := range a.reports {
			rep := &a.reports[i]
			if rep.Shard == r.shard && rep.Segment == r.segment {
				if in := rep.ChunkInputs(r.chunk); in != nil {
					return in, ""
				}
				return nil, "no such chunk"
			}
		}
		return nil, "not the owner of that segment"
	}
	return nil, whyNotKept
}

const whyNotKept = "attempt not kept"

// handleAudit answers one audit request.
func (svc *Service) handleAudit(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(svc.cfg.IOTimeout))
	typ, p, err := p2p.ReadFrame(s, maxAuditRequest, nil)
	if err == nil && typ != msgAuditRequest {
		err = fmt.Errorf("%w: frame type %d", ErrProtocol, typ)
	}
	var r auditRequest
	if err == nil {
		r, err = decodeAuditRequest(p)
	}
	if err == nil && r.run != svc.cfg.Run {
		err = fmt.Errorf("%w: an audit of another run manifest", ErrProtocol)
	}
	if err != nil {
		svc.log.Debug("audit request refused", "from", s.Conn().RemotePeer(), "err", err)
		s.Reset()
		return
	}
	in, why := svc.waitInputs(r)
	if in == nil {
		_ = p2p.WriteFrame(s, msgAuditRefused, []byte(why))
		return
	}
	svc.log.Debug("audit answered", "from", s.Conn().RemotePeer(), "attempt", r.id, "shard", r.shard, "segment", r.segment, "chunk", r.chunk)
	_ = p2p.WriteFrame(s, msgAuditInputs, encodeAuditInputs(in))
}

// Audit asks owner for the k members' messages of chunk of segment (of
// shard) of attempt id, as it combined them. The caller checks them with
// collective.AuditChunk.
func (svc *Service) Audit(ctx context.Context, owner peer.ID, id string, shard, segment, chunk, k int) ([][]byte, error) {
	if id == "" || len(id) > MaxIDLen || shard < 0 || shard > 0xffff || segment < 0 || segment > 0xffff || chunk < 0 || k < 1 || k > MaxMembers {
		return nil, fmt.Errorf("p2p: bad audit request")
	}
	ctx, cancel := context.WithTimeout(ctx, svc.cfg.IOTimeout)
	defer cancel()
	s, err := svc.h.NewStream(ctx, owner, AuditProtocolID)
	if err != nil {
		return nil, fmt.Errorf("p2p: audit: %w", err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	req := auditRequest{run: svc.cfg.Run, shard: shard, segment: segment, chunk: chunk, id: id}
	if err := p2p.WriteFrame(s, msgAuditRequest, req.encode()); err != nil {
		s.Reset()
		return nil, fmt.Errorf("p2p: audit: %w", err)
	}
	typ, p, err := p2p.ReadFrame(s, 2+k*(4+collective.MaxChunkMsgSize), nil)
	switch {
	case err != nil:
		s.Reset()
		return nil, fmt.Errorf("p2p: audit: %w", err)
	case typ == msgAuditRefused:
		if len(p) > maxAuditReason {
			p = p[:maxAuditReason]
		}
		return nil, fmt.Errorf("%w: %q", ErrAuditRefused, p)
	case typ != msgAuditInputs:
		s.Reset()
		return nil, fmt.Errorf("%w: audit answer of frame type %d", ErrProtocol, typ)
	}
	return decodeAuditInputs(p, k)
}
