package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/node"
)

// `start` without flags runs the node's defaults, and -h prints them.
func TestStartFlagDefaults(t *testing.T) {
	home := t.TempDir()
	var fromFlags node.Config
	fs, f := newStartFlags(&fromFlags)
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	fromFlags.Home, fromFlags.Listen, fromFlags.OuterLR = home, f.listen, float32(*f.outerLR)
	zero := node.Config{Home: home}
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
	for _, want := range []string{"(default " + node.DefaultListen + " and " + node.DefaultListenQUIC + ")", "(default ~/" + node.DefaultHome + ")",
		`(default "` + node.DefaultStatusAddr + `")`, "(default 4)"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("-h lacks %q", want)
		}
	}
}
