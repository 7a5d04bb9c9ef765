package p2p

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	basicconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
)

// Libp2pFunc builds a libp2p host on an identity key in place of the TCP
// and QUIC transports (Config.Libp2p): a host of go-libp2p's in-memory mock
// network, so that one process runs many nodes of the same code (the scale
// lab, docs/scale.md).
type Libp2pFunc func(key crypto.PrivKey) (host.Host, error)

// buildOn builds the host with Config.Libp2p. Such a host brings no
// resource manager, connection gater or bandwidth reporter: the connection
// manager watches its network, and its streams are counted and labelled
// (PartLabel, by protocol) here.
func (h *Host) buildOn(key crypto.PrivKey, cm *basicconnmgr.BasicConnMgr) error {
	lh, err := h.cfg.Libp2p(key)
	if err != nil {
		return fmt.Errorf("p2p: start libp2p host: %w", err)
	}
	lh.Network().Notify(cm.Notifee())
	h.h, h.cm = &countingHost{Host: lh, bw: h.bw, cm: cm}, cm
	h.built.Store(h.h)
	return nil
}

// countingHost counts the bytes of its streams in bw and serves the
// connection manager cm.
type countingHost struct {
	host.Host
	bw *bandwidthCounter
	cm *basicconnmgr.BasicConnMgr
}

// ConnManager returns the host's connection manager.
func (c *countingHost) ConnManager() connmgr.ConnManager { return c.cm }

// Close closes the host and its connection manager.
func (c *countingHost) Close() error { return errors.Join(c.Host.Close(), c.cm.Close()) }

// NewStream opens a counted stream.
func (c *countingHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	s, err := c.Host.NewStream(ctx, p, pids...)
	if err != nil {
		return nil, err
	}
	return &countedStream{Stream: s, bw: c.bw}, nil
}

// SetStreamHandler serves pid with handler on counted, labelled streams.
func (c *countingHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	c.Host.SetStreamHandler(pid, c.wrap(handler))
}

// SetStreamHandlerMatch serves the protocols match accepts with handler on
// counted, labelled streams.
func (c *countingHost) SetStreamHandlerMatch(pid protocol.ID, match func(protocol.ID) bool, handler network.StreamHandler) {
	c.Host.SetStreamHandlerMatch(pid, match, c.wrap(handler))
}

func (c *countingHost) wrap(handler network.StreamHandler) network.StreamHandler {
	return func(s network.Stream) {
		DoPart(context.Background(), protocolPart(s.Protocol()), func(context.Context) {
			handler(&countedStream{Stream: s, bw: c.bw})
		})
	}
}

// protocolPart names the part (PartLabel) that serves a stream of proto:
// gossip, the DHT, or the protocol's own id.
func protocolPart(proto protocol.ID) string {
	switch p := string(proto); {
	case strings.HasPrefix(p, "/meshsub/"), strings.HasPrefix(p, "/floodsub/"):
		return PartGossip
	case strings.HasPrefix(p, DHTProtocolPrefix+"/kad/"):
		return PartDHT
	default:
		return p
	}
}

// countedStream counts what is read and written in bw.
type countedStream struct {
	network.Stream
	bw *bandwidthCounter
}

func (s *countedStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	if n > 0 {
		s.bw.LogRecvMessage(int64(n))
		s.bw.LogRecvMessageStream(int64(n), s.Protocol(), s.Conn().RemotePeer())
	}
	return n, err
}

func (s *countedStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	if n > 0 {
		s.bw.LogSentMessage(int64(n))
		s.bw.LogSentMessageStream(int64(n), s.Protocol(), s.Conn().RemotePeer())
	}
	return n, err
}
