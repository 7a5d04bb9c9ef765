package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/train"
)

// config is one experiment configuration.
type config struct {
	Name   string   // file-name stem: CSV, plot series, work sub-directory
	Label  string   // legend text
	Flags  []string // extra `intellect-node start` flags
	Single bool     // one node alone (`intellect-node train`) with nodes× the batch
	Color  string   // SVG stroke colour
}

// configs are the node-process configurations, in the order they run.
var configs = []config{
	{Name: "blocking-int8", Label: "DiLoCo ×4, blocking, int8", Flags: []string{"--overlap=false"}, Color: "#1f77b4"},
	{Name: "overlap-int8", Label: "DiLoCo ×4, overlapped, int8", Flags: []string{"--overlap"}, Color: "#d62728"},
	{Name: "blocking-fp32", Label: "DiLoCo ×4, blocking, fp32", Flags: []string{"--overlap=false", "--fp32"}, Color: "#2ca02c"},
	{Name: "blocking-int8-ef", Label: "DiLoCo ×4, blocking, int8 + error feedback", Flags: []string{"--overlap=false", "--error-feedback"}, Color: "#9467bd"},
	{Name: "single-4x-batch", Label: "1 node, 4× batch (no DiLoCo)", Single: true, Color: "#7f7f7f"},
	{Name: "overlap-int8-mu05", Label: "DiLoCo ×4, overlapped, int8, outer momentum 0.5", Flags: []string{"--overlap", "--outer-momentum", "0.5"}, Color: "#ff7f0e"},
}

func configNames() []string {
	var n []string
	for _, c := range configs {
		n = append(n, c.Name)
	}
	return n
}

// selectConfigs returns the configurations named in the comma-separated
// list only, or all of them.
func selectConfigs(only string) ([]config, error) {
	if only == "" {
		return configs, nil
	}
	var out []config
	for _, name := range strings.Split(only, ",") {
		c, ok := configByName(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("unknown configuration %q (have %s)", name, strings.Join(configNames(), ", "))
		}
		out = append(out, c)
	}
	return out, nil
}

func configByName(name string) (config, bool) {
	for _, c := range configs {
		if c.Name == name {
			return c, true
		}
	}
	return config{}, false
}

// setup is what every configuration of one experiment shares.
type setup struct {
	work, bin, run, preset string
	nodes, inner, outer    int
	params                 int64  // model parameters
	tokensPerStep          int    // tokens of one inner step of one DiLoCo node
	seed                   uint64 // model initialisation seed (the node's, derived from the run name)
}

func newSetup(o options) (*setup, error) {
	opts, err := train.DefaultOptions(o.preset)
	if err != nil {
		return nil, err
	}
	return &setup{run: o.run, preset: o.preset, nodes: o.nodes, inner: o.inner, outer: o.outer,
		params: opts.Model.NumParams(), tokensPerStep: opts.Batch * opts.Seq * opts.GradAccum,
		seed: RunSeed(o.run)}, nil
}

// runSeed is node's derivation of the initialisation seed from the run name
// (node/node.go runSeed), so the single-node baseline starts from the same
// parameters as the DiLoCo nodes.
func RunSeed(run string) uint64 {
	s := sha256.Sum256([]byte("intellect-node/init/" + run))
	return binary.LittleEndian.Uint64(s[:8])
}

// identityDir is where node i's pinned identity key lives.
func (s *setup) identityDir(i int) string {
	return filepath.Join(s.work, "identities", fmt.Sprintf("node%d", i))
}

// makeIdentities creates one identity per node position, shared by every
// configuration: a node's data stream is derived from its peer id.
func makeIdentities(s *setup) error {
	for i := range s.nodes {
		if _, _, err := p2p.LoadOrCreateIdentity(s.identityDir(i)); err != nil {
			return fmt.Errorf("identity %d: %w", i, err)
		}
	}
	return nil
}

// goBuild builds cmd/intellect-node into bin.
func goBuild(ctx context.Context, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/intellect-node")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/intellect-node (run from the repository root): %w", err)
	}
	return nil
}
