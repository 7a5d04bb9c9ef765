package main

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/train"
)

// `start` without flags runs the node's defaults, and -h prints them.
func TestStartFlagDefaults(t *testing.T) {
	home := t.TempDir()
	var fromFlags node.Config
	fs, f := newStartFlags(&fromFlags)
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	fromFlags.Home, fromFlags.Listen = home, f.listen
	// The command overlaps by default; Config's zero value blocks, the mode
	// seeded references reproduce.
	zero := node.Config{Home: home, Overlap: node.DefaultOverlap}
	for _, c := range []*node.Config{&fromFlags, &zero} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(fromFlags, zero) {
		t.Errorf("flag defaults\n%+v\nnode defaults\n%+v", fromFlags, zero)
	}
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if !reflect.DeepEqual(zero.Listen, p2p.DefaultListen) || !slices.Contains(zero.Listen, "/ip6/::/tcp/4001") {
		t.Errorf("default listen %v, want p2p.DefaultListen %v (IPv4 and IPv6)", zero.Listen, p2p.DefaultListen)
	}
	for _, want := range []string{"(default " + strings.Join(p2p.DefaultListen, ", "), "(default ~/" + node.DefaultHome + ")",
		`(default "` + node.DefaultStatusAddr + `")`, "(default 4)"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("-h lacks %q", want)
		}
	}
}

// TestTrainFlagsDecay pins `train --lr-decay`: the fraction given, or the
// preset's without it (demo-text's baseline takes the network's schedule).
func TestTrainFlagsDecay(t *testing.T) {
	def, err := train.DefaultOptions("tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ flag, want float64 }{{0, def.DecayFrac}, {0.5, 0.5}, {1, 1}} {
		rc, err := trainFlags{preset: "tiny", decay: tc.flag}.runConfig()
		if err != nil || rc.Options.DecayFrac != tc.want {
			t.Errorf("--lr-decay %v: decay %v (%v), want %v", tc.flag, rc.Options.DecayFrac, err, tc.want)
		}
	}
}

// TestStartRefusesExplicitZero pins that the settings whose 0 means "the
// codec's" refuse an explicit 0 by name, and take other values.
func TestStartRefusesExplicitZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		bad  string
	}{
		{[]string{"--inner-steps", "0"}, "--inner-steps 0"},
		{[]string{"--outer-lr", "0"}, "--outer-lr 0"},
		{[]string{"--lr-decay", "0"}, "--lr-decay 0"},
		{[]string{"--inner-steps", "5", "--outer-lr", "0.5", "--lr-decay", "0.2", "--outer-momentum", "0", "--worker-momentum", "0"}, ""},
	} {
		var c node.Config
		fs, _ := newStartFlags(&c)
		if err := parseFlags(fs, tc.args); err != nil {
			t.Fatal(err)
		}
		c.Given = givenRunFlags(fs)
		err := zeroMeansDefault(&c)
		if tc.bad == "" && err != nil || tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.bad)
		}
	}
}
