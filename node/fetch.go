package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/p2p/ckpt"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
)

// fetchKey names the model of a fetch request.
type fetchKey struct {
	step uint64
	hash string
}

// noteWanted records the model m asks this node to fetch, if any (mesh
// goroutine).
func (n *Node) noteWanted(m *mesh.Mesh) {
	step, hash, ok := m.Fetching()
	if !ok {
		n.wanted.Store(nil)
		return
	}
	if w := n.wanted.Load(); w == nil || w.step != step || w.hash != hash {
		n.wanted.Store(&fetchKey{step, hash})
	}
}

// stale reports whether the mesh no longer asks for f: it synced since
// (the model f names, or another), or asked for another model after its
// sync timeout while a slow download ran. Carried out, such a request
// downloaded a model this node held already, or one the mesh had given up
// on, whose failure then made the mesh drop the fetch it wanted: on links
// at 3 % of their rate, each costs a download of a minute or more.
func (n *Node) stale(f *mesh.Fetch) bool {
	w := n.wanted.Load()
	return w == nil || w.step != f.Step || w.hash != f.Hash
}

// fetch downloads the model the mesh named (θ₀ and outer momentum of
// f.Step) from its donors and verifies it against f.Hash; the loop makes
// it this node's model (nodePort.Fetch). On failure it returns nil and no
// error: the mesh, told SyncFailed after a backoff, picks donors again.
func (n *Node) fetch(ctx context.Context, f *mesh.Fetch, adopt bool) (*diloco.Fetched, error) {
	what := "fetching the live model"
	if adopt {
		what = "adopting the larger side's model"
	}
	n.log.Info(what, "step", f.Step, "hash", short(f.Hash), "donors", len(f.From), "our_step", n.model.Step(), "our_hash", short(n.model.Hash()))
	// The board's download is the one running: none once this one ended,
	// whichever way (a reader took a download that had failed half-way
	// for one still running, for good).
	defer n.board.update(func(s *Status) { s.Download = nil })
	if got := n.fetchUpdate(ctx, f); got != nil {
		return got, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	donors := n.reachableDonors(f.From)
	start := time.Now()
	progress := n.fetchProgress()
	data, bad, err := ckpt.Fetch(ctx, n.host.Libp2p(), donors, ckpt.FetchSpec{Step: f.Step, Hash: f.Hash, Run: n.runKey()},
		ckpt.FetchConfig{MaxBytes: 16*n.params + 1<<20, Logger: n.cfg.Logger}, progress)
	for _, b := range bad {
		n.log.Warn("donor served bad checkpoint data", "peer", b)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if n.stale(f) {
			// The mesh has moved on: it asked for another fetch or synced.
			n.log.Info("a fetch the mesh no longer asks for failed", "step", f.Step, "err", err)
			return nil, nil
		}
		return nil, n.fetchFailed(ctx, f, "download", "model fetch failed; the mesh picks donors again", err)
	}
	theta0, v, state, err := n.decodeFetched(data, f)
	if err != nil {
		return nil, n.fetchFailed(ctx, f, "unusable", "fetched model unusable", err)
	}
	hist := n.fetchSucceeded(f, state, start)
	n.log.Info("model synced", "step", f.Step, "hash", short(f.Hash), "took", fmtDur(time.Since(start)), "adopted", adopt)
	return &diloco.Fetched{Step: f.Step, Theta0: theta0, Momentum: v, History: hist}, nil
}

// fetchSucceeded reads the line history that came with a verified model
// (the snapshot's or the step update's state JSON), resets the backoff and
// counts the fetch's time.
func (n *Node) fetchSucceeded(f *mesh.Fetch, state []byte, start time.Time) []mesh.Made {
	hist, herr := fetchedHistory(state, f.Step)
	if herr != nil {
		// The model is verified; its history is the donor's word. Without
		// it this node admits as if the line had none, until its first ring.
		n.log.Warn("the donors' line history is unusable; newcomers are judged without it", "step", f.Step, "err", herr)
	}
	n.retry.succeeded()
	n.met.fetchSeconds.Observe(time.Since(start).Seconds())
	return hist
}

// reachableDonors returns the donors of from (this node excluded) that it
// has a direct connection to, or all of them if none: a donor behind a NAT
// that this node reaches only through a relay, or not at all, would hold
// the download's manifest round for its whole timeout.
func (n *Node) reachableDonors(from []mesh.PeerID) []peer.ID {
	var all, direct []peer.ID
	for _, id := range from {
		p, err := peerID(id)
		if err != nil || id == n.self {
			continue
		}
		all = append(all, p)
		if info := n.host.PeerInfo(p); info.Connected && !info.Relayed {
			direct = append(direct, p)
		}
	}
	if len(direct) > 0 {
		return direct
	}
	return all
}

// fetchFailed counts and reports a failed fetch — a warning the first time
// a reason comes up, then at debug level while it repeats — waits out the
// backoff, then tells the mesh, which picks donors again: a fetch that
// cannot succeed (another run's model, a model over the size limit) does
// not become a storm of retries and log lines.
func (n *Node) fetchFailed(ctx context.Context, f *mesh.Fetch, cause, msg string, err error) error {
	n.met.fetchFailures.WithLabelValues(cause).Inc()
	if errors.Is(err, ckpt.ErrMovedOn) {
		// Not a failure to back off from: the network is a step ahead of
		// what the mesh asked for; it asks for the newest at once.
		n.log.Info("the donors moved on; fetching their newer step", "step", f.Step)
		nodePort{n}.SyncFailed()
		return nil
	}
	wait, repeat := n.retry.failed(cause + ": " + err.Error())
	level := slog.LevelWarn
	if repeat {
		level = slog.LevelDebug
	}
	n.log.Log(ctx, level, msg, "step", f.Step, "err", err, "retry_in", fmtDur(wait), "failures", n.retry.fails)
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	nodePort{n}.SyncFailed()
	return nil
}

// backoff spaces the retries of something that keeps failing: the first
// retry after base, each next one twice as late, up to limit.
type backoff struct {
	base, limit time.Duration
	fails       int
	lastWhy     string
}

// Fetch retries: half a second, doubling to a minute.
const (
	fetchRetryBase  = 500 * time.Millisecond
	fetchRetryLimit = time.Minute
)

// failed records a failure for reason why and returns how long to wait
// before retrying, and whether why is the reason of the failure before.
func (b *backoff) failed(why string) (wait time.Duration, repeat bool) {
	b.fails++
	repeat, b.lastWhy = why == b.lastWhy, why
	wait = b.base
	for i := 1; i < b.fails && wait < b.limit; i++ {
		wait *= 2
	}
	return min(wait, b.limit), repeat
}

// succeeded resets the backoff.
func (b *backoff) succeeded() { b.fails, b.lastWhy = 0, "" }

// fetchProgress returns the progress callback of a fetch: the board, the
// operator's progress bar, and a log line a second.
func (n *Node) fetchProgress() func(ckpt.Progress) {
	lastLog := time.Now()
	return func(p ckpt.Progress) {
		n.board.update(func(s *Status) {
			s.Download = &Download{Step: p.Step, BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Donors: p.Donors, Retries: p.ChunksRetried}
		})
		if n.cfg.OnProgress != nil {
			n.cfg.OnProgress(Progress{Work: "fetch", Done: p.BytesDone, Total: p.BytesTotal,
				Detail: fmt.Sprintf("step %d from %d donors", p.Step, p.Donors)})
		}
		if time.Since(lastLog) > time.Second || p.BytesDone == p.BytesTotal {
			lastLog = time.Now()
			n.log.Info("download", "step", p.Step, "done", p.BytesDone, "total", p.BytesTotal,
				"donors", p.Donors, "retried", p.ChunksRetried, "bad_donors", p.BadDonors)
		}
	}
}

// decodeFetched decodes a fetched snapshot and checks it fits this model
// and hashes to what the mesh named.
func (n *Node) decodeFetched(data []byte, f *mesh.Fetch) (theta0, v []float32, state []byte, err error) {
	theta0, v, state, err = ckpt.DecodeSnapshot(data)
	if err == nil && (int64(len(theta0)) != n.params || len(v) != len(theta0)) {
		err = fmt.Errorf("model of %d params (momentum %d), ours has %d: different model config", len(theta0), len(v), n.params)
	}
	if err == nil && train.Hash(theta0) != f.Hash {
		err = errors.New("hash mismatch after verification")
	}
	return theta0, v, state, err
}
