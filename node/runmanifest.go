package node

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
)

// runManifest is the manifest a node runs under, with its encoding and id.
type runManifest struct {
	m   *Manifest
	raw []byte   // canonical encoding, served to joiners
	id  string   // hex SHA-256 of raw
	key [32]byte // id as bytes, for the stream handshakes
}

// manifestConnectTimeout bounds connecting to one bootstrap peer to ask it
// for the manifest.
const manifestConnectTimeout = 10 * time.Second

// initManifest opens the data, then finds the run manifest — read from
// home, fetched from the bootstrap peers, or created — checks the operator's
// explicit settings against it, and configures the node from it.
func (n *Node) initManifest(ctx context.Context) error {
	var err error
	n.data = train.DefaultSource()
	if n.cfg.Data != "" {
		if n.data, err = train.OpenSource(n.cfg.Data); err != nil {
			return err
		}
	}
	want, err := manifestFromConfig(n.cfg, n.data)
	if err != nil {
		return err
	}
	rm, how, err := n.findManifest(ctx, want)
	if err != nil {
		return err
	}
	if err := checkAgainst(want, rm, n.cfg.Given); err != nil {
		return err
	}
	if err := n.checkAdmission(rm); err != nil {
		return err
	}
	if err := n.applyManifest(rm); err != nil {
		return err
	}
	n.log.Info("run manifest "+how, "run", rm.m.Run, "manifest", rm.id, "preset", rm.m.Preset,
		"inner_steps", rm.m.InnerSteps, "min_members", rm.m.minMembers(), "codec", rm.m.Compression.Codec, "optimizer", cmp.Or(rm.m.Train.Optimizer, train.OptimizerAdamW), "admission", rm.m.Admission.Policy, "file", filepath.Join(n.cfg.Home, ManifestFile))
	return nil
}

// manifestFromConfig is the manifest a creator with cfg would write, without
// its nonce.
func manifestFromConfig(cfg Config, data train.Source) (*Manifest, error) {
	opts, err := trainOptions(cfg, "")
	if err != nil {
		return nil, err
	}
	opts.Worker = 0
	if opts.Model, err = train.FitVocab(opts.Model, data, cfg.ConfigFile == ""); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	m := &Manifest{
		Version: ManifestVersion, Run: cfg.Run, Preset: cfg.Preset, Tokenizer: cfg.Tokenizer,
		Data: dataMixture(data), InnerSteps: cfg.InnerSteps, Train: opts,
		OuterLR: cfg.OuterLR, OuterMomentum: *cfg.OuterMomentum, WorkerMomentum: *cfg.WorkerMomentum,
		Compression: cfg.compression(),
		Averaging:   cfg.Averaging, Admission: Admission{Policy: cfg.Admission}, MaxWeight: cfg.InnerSteps,
		MinMembers: cfg.MinMembers, CloseFraction: *cfg.CloseFraction,
	}
	if cfg.ConfigFile != "" {
		m.Preset = ""
	}
	return m, nil
}

// dataMixture names the components of a data source as a manifest records
// them: the mixture spec's names, else the base names of the paths.
func dataMixture(data train.Source) []train.MixtureEntry {
	s, ok := data.(*train.ShardSource)
	if !ok {
		return []train.MixtureEntry{{Name: data.String(), Weight: 1}}
	}
	mix := s.Mixture()
	for i := range mix {
		mix[i].Name = filepath.Base(mix[i].Name)
	}
	return mix
}

// findManifest returns the run manifest from home, else from the bootstrap
// peers (stored in home), else a new one (a creator: no bootstrap), and
// says which.
func (n *Node) findManifest(ctx context.Context, want *Manifest) (*runManifest, string, error) {
	m, id, err := readManifestFile(n.cfg.Home)
	switch {
	case err != nil:
		return nil, "", err
	case m != nil:
		if n.cfg.ManifestID != "" && id != n.cfg.ManifestID {
			return nil, "", fmt.Errorf("%w: --manifest %s, but %s holds run manifest %s", ErrBadConfig,
				n.cfg.ManifestID, filepath.Join(n.cfg.Home, ManifestFile), id)
		}
		raw, _ := m.Encode()
		return newRunManifest(m, raw), "read", nil
	case len(n.cfg.Bootstrap) == 0 && n.cfg.ManifestID != "":
		return nil, "", fmt.Errorf("%w: --manifest %s needs --bootstrap peers to fetch it from", ErrBadConfig, n.cfg.ManifestID)
	case len(n.cfg.Bootstrap) == 0:
		return n.createManifest(want)
	}
	rm, err := n.fetchManifest(ctx)
	if err != nil {
		return nil, "", err
	}
	if err := writeManifestFile(n.cfg.Home, rm.raw); err != nil {
		return nil, "", err
	}
	return rm, "fetched", nil
}

// createManifest draws the genesis nonce of a new run and writes its
// manifest to home.
func (n *Node) createManifest(want *Manifest) (*runManifest, string, error) {
	m := *want
	m.Admission = n.admission()
	var err error
	if m.Nonce, err = newNonce(); err != nil {
		return nil, "", err
	}
	if err := m.Validate(); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	raw, err := m.Encode()
	if err != nil {
		return nil, "", err
	}
	if err := writeManifestFile(n.cfg.Home, raw); err != nil {
		return nil, "", err
	}
	return newRunManifest(&m, raw), "created", nil
}

func newRunManifest(m *Manifest, raw []byte) *runManifest {
	id := ManifestID(raw)
	return &runManifest{m: m, raw: raw, id: id, key: manifestKey(id)}
}

// manifestKey is a manifest id (64 hex digits) as bytes.
func manifestKey(id string) [32]byte {
	var key [32]byte
	k, _ := hex.DecodeString(id)
	copy(key[:], k)
	return key
}

// fetchManifest asks the bootstrap peers in turn for the run manifest and
// returns the first that verifies (against --manifest if pinned) and
// decodes; the error names what every peer did wrong.
func (n *Node) fetchManifest(ctx context.Context) (*runManifest, error) {
	var errs []error
	for _, addr := range n.cfg.Bootstrap {
		rm, err := n.fetchManifestFrom(ctx, addr)
		if err == nil {
			return rm, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n.log.Warn("bootstrap peer gave no usable run manifest", "addr", addr, "err", err)
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("node: no bootstrap peer served a usable run manifest: %w", errors.Join(errs...))
}

// fetchManifestFrom connects to one bootstrap address and gets its manifest.
func (n *Node) fetchManifestFrom(ctx context.Context, addr string) (*runManifest, error) {
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap %q: %w", addr, err)
	}
	cctx, cancel := context.WithTimeout(ctx, manifestConnectTimeout)
	defer cancel()
	if err := n.host.Dial(cctx, *ai); err != nil {
		return nil, fmt.Errorf("connect %s: %w%s", ai.ID, err, n.pnetHint(err))
	}
	raw, id, err := p2p.FetchManifest(ctx, n.host.Libp2p(), ai.ID, n.cfg.ManifestID)
	if err != nil {
		return nil, err
	}
	m, err := DecodeManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("manifest %s from %s: %w", short(id), ai.ID, err)
	}
	return newRunManifest(m, raw), nil
}

// checkAgainst compares what the operator set explicitly (given: manifest
// field path → the flag as typed) and the data the node opened with the run
// manifest: any difference is an error naming the fields.
func checkAgainst(want *Manifest, rm *runManifest, given map[string]string) error {
	var msgs []string
	paths := make([]string, 0, len(given))
	for p := range given {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if d := ManifestDiff(want, rm.m, p); len(d) > 0 {
			msgs = append(msgs, fmt.Sprintf("flag %s contradicts the run manifest %s: %s", given[p], short(rm.id), strings.Join(d, ", ")))
		}
	}
	if _, ok := given["data"]; !ok {
		if d := ManifestDiff(want, rm.m, "data"); len(d) > 0 {
			msgs = append(msgs, fmt.Sprintf("the run manifest %s trains on other data (give --data): %s", short(rm.id), strings.Join(d, ", ")))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %s", ErrBadConfig, strings.Join(msgs, "; "))
	}
	return nil
}

// applyManifest makes the run's settings the node's.
func (n *Node) applyManifest(rm *runManifest) error {
	m := rm.m
	c := &n.cfg
	c.Run, c.Preset, c.Tokenizer, c.InnerSteps = m.Run, m.Preset, m.Tokenizer, m.InnerSteps
	c.OuterLR, c.OuterMomentum, c.WorkerMomentum = m.OuterLR, new(m.OuterMomentum), new(m.WorkerMomentum)
	c.applyCompression(m.Compression)
	c.Averaging = m.Averaging
	c.Optimizer = m.Train.Optimizer
	c.Seed = m.Train.Seed
	c.MinMembers = n.minMembers(m)
	c.CloseFraction = new(m.CloseFraction)
	n.opts = m.Train
	n.run = rm
	if err := c.check(); err != nil {
		return err
	}
	if _, err := train.FitVocab(m.Train.Model, n.data, false); err != nil {
		return fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	if err := n.host.SetRun(rm.m.Run, rm.id); err != nil {
		return err
	}
	return n.setAdmission(rm)
}

// minMembers is the minimum this node holds the first ring to: the run's,
// raised by its own --min-members. A lower flag cannot lower the run's
// (every member holds the run's first ring to the run's minimum): it is
// ignored, with a warning.
func (n *Node) minMembers(m *Manifest) int {
	run, own := m.minMembers(), n.cfg.MinMembers
	switch {
	case own < run && own != DefaultMinMembers:
		n.log.Warn("--min-members is below the run's minimum: the run's applies", "flag", own, "run", run)
	case own > run:
		n.log.Info("--min-members is above the run's minimum: this node takes part in no first ring smaller than its own",
			"flag", own, "run", run)
	}
	return max(run, own)
}

// runID is the run manifest's id ("" for a node built without one, in unit
// tests).
func (n *Node) runID() string {
	if n.run == nil {
		return ""
	}
	return n.run.id
}

// runKey is the run manifest's id as the stream handshakes carry it (zero
// without one).
func (n *Node) runKey() [32]byte {
	if n.run == nil {
		return [32]byte{}
	}
	return n.run.key
}
