package node

import (
	"context"
	"testing"

	"github.com/intellect-node/intellect-node/node/diloco"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestInt8PointHashes pins the model hashes of three members' first outer
// steps run as `--codec int8` runs them (tiny preset, embedded corpus,
// robust averaging), so that changing the shipped defaults cannot change
// what `--codec int8` trains. The hashes were taken when int8 at H = 5 was
// the default; a change of the arithmetic (kernels, codec, outer step)
// changes them too, and must say so here.
func TestInt8PointHashes(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 3 members")
	}
	cfg := Config{Run: "golden", Codec: CodecInt8, MaxOuterSteps: 2, Home: t.TempDir()}
	ref, err := ReferenceDiLoCo(cfg, []peer.ID{"member-a", "member-b", "member-c"})
	if err != nil {
		t.Fatal(err)
	}
	if ref.Inner != 5 || ref.OuterLR != 1 || ref.OuterMomentum != 0 || ref.WorkerMomentum != 0 {
		t.Fatalf("--codec int8 runs H %d, outer (%v, %v), worker momentum %v: want the int8 point (5, 1, 0, 0)",
			ref.Inner, ref.OuterLR, ref.OuterMomentum, ref.WorkerMomentum)
	}
	var got []string
	if _, err := diloco.RunLocal(context.Background(), ref, train.DefaultSource(), func(r diloco.Record) {
		got = append(got, r.Hash)
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"491d13bd36a3ce7562e0562087768280702bb5739393a73f3a42d9d5ff9404e1",
		"25ebefc83e1bd83ce6dbead8544b3e76a73a8285f696d72220998ba8fe9f2e6b",
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Errorf("outer step %d: model hash %q, want %q", i+1, got, want)
			break
		}
	}
}
