package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/internal/wan"
)

// TestPrefixWriter: whole lines get the host's prefix, a partial line waits
// for its end.
func TestPrefixWriter(t *testing.T) {
	var out strings.Builder
	w := newPrefixWriter(&out, "sfo")
	w.Write([]byte("one\ntw"))
	w.Write([]byte("o\n"))
	w.Write([]byte("three"))
	if got, want := out.String(), "sfo| one\nsfo| two\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
}

// TestScaleFlags: -rate-scale wins, -model-bytes with -outer-step compute
// it, neither means 1, and one without the other is an error.
func TestScaleFlags(t *testing.T) {
	cases := []struct {
		f    netFlags
		want float64
		ok   bool
	}{
		{netFlags{}, 1, true},
		{netFlags{rateScale: 0.5, modelBytes: 1e6, outerStep: "5s"}, 0.5, true},
		{netFlags{modelBytes: 1e6, outerStep: "5s"}, wan.RateScale(1e6, 5*time.Second), true},
		{netFlags{modelBytes: 1e6}, 0, false},
		{netFlags{outerStep: "5s"}, 0, false},
		{netFlags{modelBytes: 1e6, outerStep: "soon"}, 0, false},
		{netFlags{rateScale: -1}, 0, false},
	}
	for _, c := range cases {
		got, err := c.f.scale()
		if (err == nil) != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%+v: scale %v err %v, want %v ok=%v", c.f, got, err, c.want, c.ok)
		}
	}
}
