package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/train"
	"github.com/libp2p/go-libp2p/core/network"
)

// testManifest is the manifest a creator with the default tiny config
// would write.
func testManifest(t testing.TB) *Manifest {
	t.Helper()
	return testManifestOf(t, Config{Home: t.TempDir(), Run: "m1", InnerSteps: 20, Codec: CodecInt8})
}

// testManifestOf is the manifest a creator with c would write.
func testManifestOf(t testing.TB, c Config) *Manifest {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := manifestFromConfig(c, train.DefaultSource())
	if err != nil {
		t.Fatal(err)
	}
	m.Nonce = strings.Repeat("0f", 16)
	return m
}

// TestManifestCanonical: Encode then DecodeManifest gives the same
// manifest and bytes; any other spelling of the same content, unknown
// fields, trailing bytes and oversized input are refused.
func TestManifestCanonical(t *testing.T) {
	m := testManifest(t)
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := got.Encode()
	if !bytes.Equal(b, b2) || ManifestID(b) != ManifestID(b2) || len(ManifestID(b)) != 64 {
		t.Fatalf("round trip changed the bytes:\n%s\n%s", b, b2)
	}
	bad := map[string][]byte{
		"spaces":        bytes.Replace(b, []byte(`"version":1`), []byte(`"version": 1`), 1),
		"trailing":      append(append([]byte{}, b...), '\n'),
		"unknown field": bytes.Replace(b, []byte(`{"version":1`), []byte(`{"x":1,"version":1`), 1),
		"reordered":     bytes.Replace(b, []byte(`"version":1,"run":"m1"`), []byte(`"run":"m1","version":1`), 1),
		"oversized":     append(append([]byte{}, b...), make([]byte, MaxManifestSize)...),
		"not json":      []byte("hello"),
	}
	for name, p := range bad {
		if _, err := DecodeManifest(p); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: %v, want ErrManifest", name, err)
		}
	}
}

// TestManifestValidate: each value this version cannot run is refused by
// name.
func TestManifestValidate(t *testing.T) {
	cases := map[string]func(m *Manifest){
		"version":                func(m *Manifest) { m.Version = 2 },
		"run name":               func(m *Manifest) { m.Run = "a/b" },
		"nonce":                  func(m *Manifest) { m.Nonce = "xyz" },
		"max weight":             func(m *Manifest) { m.MaxWeight = 1 << 24 },
		"worker":                 func(m *Manifest) { m.Train.Worker = 3 },
		"outer lr":               func(m *Manifest) { m.OuterLR = 0 },
		"worker momentum":        func(m *Manifest) { m.WorkerMomentum = 1 },
		"codec":                  func(m *Manifest) { m.Compression.Codec = "int4" },
		"shards":                 func(m *Manifest) { m.Compression.Shards = 0 },
		"admission":              func(m *Manifest) { m.Admission.Policy = "vip" },
		"psk without commitment": func(m *Manifest) { m.Admission.Policy = AdmissionPSK },
		"psk with a creator": func(m *Manifest) {
			m.Admission = Admission{Policy: AdmissionPSK, PSKCommitment: PSKCommitment(nil), Creator: testCreator}
		},
		"open with a commitment":    func(m *Manifest) { m.Admission.PSKCommitment = PSKCommitment(nil) },
		"allowlist without creator": func(m *Manifest) { m.Admission.Policy = AdmissionAllowlist },
		"allowlist, creator without key": func(m *Manifest) {
			m.Admission = Admission{Policy: AdmissionAllowlist, Creator: "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"}
		},
		"allowlist, creator not canonical": func(m *Manifest) {
			m.Admission = Admission{Policy: AdmissionAllowlist, Creator: "z" + testCreator[1:]}
		},
		"no data":               func(m *Manifest) { m.Data = nil },
		"data name":             func(m *Manifest) { m.Data[0].Name = "a\x00b" },
		"batch":                 func(m *Manifest) { m.Train.Batch = 0 },
		"min members negative":  func(m *Manifest) { m.MinMembers = -1 },
		"min members over mesh": func(m *Manifest) { m.MinMembers = mesh.MaxMembers + 1 },
	}
	if err := testManifest(t).Validate(); err != nil {
		t.Fatalf("good manifest: %v", err)
	}
	for name, spoil := range cases {
		m := testManifest(t)
		spoil(m)
		if err := m.Validate(); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: %v, want ErrManifest", name, err)
		}
	}
}

// TestManifestMinMembers: the creator's minimum is recorded; a manifest
// written before the field existed (no min_members) still decodes to the
// same bytes and id and reads as a minimum of 1; a member's own
// --min-members raises the run's for itself and never lowers it.
func TestManifestMinMembers(t *testing.T) {
	m := testManifestOf(t, Config{Home: t.TempDir(), Run: "m1", InnerSteps: 20, MinMembers: 3, CloseFraction: new(0.0)})
	b, _ := m.Encode()
	if !bytes.HasSuffix(b, []byte(`"max_weight":20,"min_members":3}`)) {
		t.Fatalf("min members not recorded last: %s", b)
	}
	old := bytes.Replace(b, []byte(`,"min_members":3`), nil, 1)
	got, err := DecodeManifest(old)
	if err != nil {
		t.Fatalf("a manifest without min_members: %v", err)
	}
	if again, _ := got.Encode(); !bytes.Equal(again, old) || got.minMembers() != 1 {
		t.Fatalf("re-encoded as %s, minimum %d", again, got.minMembers())
	}
	n := &Node{log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct{ run, own, want int }{{0, 1, 1}, {3, 1, 3}, {3, 2, 3}, {3, 5, 5}, {0, 4, 4}} {
		n.cfg.MinMembers = tc.own
		if got := n.minMembers(&Manifest{MinMembers: tc.run}); got != tc.want {
			t.Errorf("run %d, own %d: minimum %d, want %d", tc.run, tc.own, got, tc.want)
		}
	}
}

// testCreator is an Ed25519 peer id: its public key is inlined.
const testCreator = "12D3KooWCEBuiWKc2NPr8NqKSTMzF336zPzThv78oFc1g1tdc7sd"

// TestManifestAdmissionRoundTrip: psk and allowlist manifests are
// canonical with their own fields, and an open one's bytes did not change
// (its extra fields are omitted).
func TestManifestAdmissionRoundTrip(t *testing.T) {
	for _, adm := range []Admission{
		{Policy: AdmissionOpen},
		{Policy: AdmissionPSK, PSKCommitment: PSKCommitment([]byte("key"))},
		{Policy: AdmissionAllowlist, Creator: testCreator},
	} {
		m := testManifest(t)
		m.Admission = adm
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeManifest(b)
		if err != nil || got.Admission != adm {
			t.Fatalf("%+v: decoded %+v, %v", adm, got, err)
		}
		if adm.Policy == AdmissionOpen && !bytes.Contains(b, []byte(`"admission":{"policy":"open"},`)) {
			t.Fatalf("open admission encoded as %s", b)
		}
	}
}

// TestManifestDiffAndCheck: differences are named by field path with the
// manifest's value, and only given fields (plus the data) count.
func TestManifestDiffAndCheck(t *testing.T) {
	run := testManifest(t)
	raw, _ := run.Encode()
	rm := newRunManifest(run, raw)
	mine := testManifest(t)
	mine.InnerSteps, mine.MaxWeight, mine.Train.LR = 10, 10, 0.5
	d := ManifestDiff(mine, run)
	if !slices.Equal(d, []string{"inner_steps = 20", "max_weight = 20", "train.lr = 0.003"}) {
		t.Fatalf("diff %q", d)
	}
	if err := checkAgainst(mine, rm, nil); err != nil {
		t.Fatalf("nothing given: %v", err)
	}
	err := checkAgainst(mine, rm, map[string]string{"inner_steps": "--inner-steps 10", "outer_lr": "--outer-lr 1"})
	want := "flag --inner-steps 10 contradicts the run manifest " + short(rm.id) + ": inner_steps = 20"
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "outer_lr") {
		t.Fatalf("got %v\nwant it to contain %q and not outer_lr", err, want)
	}
	// --optimizer muon against a run of AdamW (recorded as no optimizer),
	// and --optimizer adamw against it: the first contradicts, the second
	// does not.
	adam := testManifest(t)
	adam.Train.Optimizer = ""
	araw, _ := adam.Encode()
	arm := newRunManifest(adam, araw)
	mine = testManifest(t)
	mine.Train.Optimizer = train.OptimizerMuon
	err = checkAgainst(mine, arm, map[string]string{"train.optimizer": "--optimizer muon"})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "--optimizer muon contradicts") || !strings.Contains(err.Error(), "train.optimizer = (absent)") {
		t.Fatalf("--optimizer muon on an AdamW run: %v", err)
	}
	mine.Train.Optimizer = ""
	if err := checkAgainst(mine, arm, map[string]string{"train.optimizer": "--optimizer adamw"}); err != nil {
		t.Fatalf("--optimizer adamw on an AdamW run: %v", err)
	}
	// --lr-decay 1 against the run's schedule.
	mine = testManifest(t)
	mine.Train.DecayFrac = 1
	err = checkAgainst(mine, rm, map[string]string{"train.decay_frac": "--lr-decay 1"})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "--lr-decay 1 contradicts") || !strings.Contains(err.Error(), "train.decay_frac = 0.2") {
		t.Fatalf("--lr-decay 1 on a run decaying over 0.2: %v", err)
	}
	// --worker-momentum 0.6 against a run without it (absent), and 0 against one with it.
	mine = testManifest(t)
	mine.WorkerMomentum = 0.6
	err = checkAgainst(mine, rm, map[string]string{"worker_momentum": "--worker-momentum 0.6"})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "worker_momentum = (absent)") {
		t.Fatalf("--worker-momentum 0.6 on a run without it: %v", err)
	}
	wraw, _ := mine.Encode()
	err = checkAgainst(testManifest(t), newRunManifest(mine, wraw), map[string]string{"worker_momentum": "--worker-momentum 0"})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "worker_momentum = 0.6") {
		t.Fatalf("--worker-momentum 0 on a run with 0.6: %v", err)
	}
	mine = testManifest(t)
	mine.Data = []train.MixtureEntry{{Name: "web.tok", Weight: 1}}
	if err := checkAgainst(mine, rm, nil); err == nil || !strings.Contains(err.Error(), "other data") {
		t.Fatalf("other data: %v", err)
	}
}

// TestManifestFile: written durably, read back, a corrupt file refused.
func TestManifestFile(t *testing.T) {
	home := t.TempDir()
	if m, _, err := readManifestFile(home); m != nil || err != nil {
		t.Fatalf("empty home: %v %v", m, err)
	}
	raw, _ := testManifest(t).Encode()
	if err := writeManifestFile(home, raw); err != nil {
		t.Fatal(err)
	}
	m, id, err := readManifestFile(home)
	if err != nil || id != ManifestID(raw) || m.Run != "m1" {
		t.Fatalf("read back: %v %s", err, id)
	}
	if err := os.WriteFile(filepath.Join(home, ManifestFile), raw[:len(raw)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readManifestFile(home); !errors.Is(err, ErrManifest) {
		t.Fatalf("corrupt file: %v", err)
	}
}

func FuzzDecodeManifest(f *testing.F) {
	b, _ := testManifest(f).Encode()
	f.Add(b)
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := DecodeManifest(p)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted an invalid manifest: %v", err)
		}
		if b, _ := m.Encode(); !bytes.Equal(b, p) {
			t.Fatalf("accepted a non-canonical encoding")
		}
	})
}

// TestJoinerRefusesBadManifest: a joiner whose only bootstrap peer serves
// a manifest that hashes right but does not decode, or bytes that do not
// hash to the id they claim, refuses to start and says so.
func TestJoinerRefusesBadManifest(t *testing.T) {
	good, _ := testManifest(t).Encode()
	cases := map[string]struct {
		serve []byte
		want  string
	}{
		"corrupt":  {good[:len(good)-1], "bad run manifest"},
		"spoiled":  {bytes.Replace(good, []byte(`"policy":"open"`), []byte(`"policy":"psk"`), 1), `admission policy "psk"`},
		"oversize": {nil, "frame too large"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			donor, err := p2p.New(context.Background(), p2p.Config{Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Logger: unitLog})
			if err != nil {
				t.Fatal(err)
			}
			defer donor.Close()
			if tc.serve != nil {
				srv, err := p2p.ServeManifest(donor.Libp2p(), tc.serve, unitLog)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
			} else {
				donor.Libp2p().SetStreamHandler(p2p.ManifestProtocolID, func(s network.Stream) {
					_ = p2p.WriteFrame(s, 1, make([]byte, 32+MaxManifestSize+1))
					_ = s.Close()
				})
			}
			cfg := Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: donor.Addrs(),
				StatusAddr: "off", Device: "sim", SimStep: time.Millisecond, Logger: unitLog}
			n, err := New(context.Background(), cfg)
			if err == nil {
				n.host.Close()
				t.Fatal("joined with a bad manifest")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "no bootstrap peer served a usable run manifest") {
				t.Fatalf("err %v, want it to name %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(cfg.Home, ManifestFile)); !os.IsNotExist(err) {
				t.Fatalf("a refused manifest was stored: %v", err)
			}
		})
	}
}

// TestManifestCloseFraction: a new run records the close rule's fraction
// (DefaultCloseFraction unless set) and its members use it; a manifest
// without it (written before it existed, or created with 0) waits for
// every member.
func TestManifestCloseFraction(t *testing.T) {
	m := testManifestOf(t, Config{Home: t.TempDir(), Run: "c1", InnerSteps: 20})
	b, _ := m.Encode()
	if !bytes.HasSuffix(b, []byte(`"close_fraction":0.5}`)) {
		t.Fatalf("close fraction not recorded: %s", b)
	}
	old, err := DecodeManifest(bytes.Replace(b, []byte(`,"close_fraction":0.5`), nil, 1))
	if err != nil || old.CloseFraction != 0 {
		t.Fatalf("a manifest without close_fraction: %v, %v", err, old)
	}
	m.CloseFraction = 1.5
	if err := m.Validate(); !errors.Is(err, ErrManifest) {
		t.Fatalf("close fraction 1.5: %v", err)
	}
}
