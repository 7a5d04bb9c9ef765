package node

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh/collective"
)

// The defaults a node ships, pinned: the shard count moves the int8
// quantization boundaries (model hashes), the port is in the README.
func TestShippedDefaults(t *testing.T) {
	c := Config{Home: t.TempDir()}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{Home: c.Home, Listen: []string{"/ip4/0.0.0.0/tcp/4001", "/ip6/::/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1", "/ip6/::/udp/4001/quic-v1"}, Run: "default", Reachability: "auto", Averaging: "robust", Codec: "q2", Preset: "tiny", Device: "cpu",
		StatusAddr: "127.0.0.1:8642", InnerSteps: 26, MinMembers: 1, CloseFraction: new(0.5), OuterLR: 0.7, OuterMomentum: new(float32(0)), Shards: 4,
		WorkerMomentum: new(float32(0.6)), LRDecay: 0.5, ErrorFeedback: true, FeedbackDecay: 1,
		Tick: 100 * time.Millisecond, AllReduceTimeout: time.Minute, CheckpointEvery: 10, KeepCheckpoints: 3,
		RingOrder: "latency", Tokenizer: "byte", Admission: "open", Optimizer: "muon", Logger: c.Logger}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults\n%+v\nwant\n%+v", c, want)
	}
	if collective.DefaultShards != 4 || (&collective.AllReduceConfig{}).Validate() != nil {
		t.Errorf("collective.DefaultShards = %d, want the node's 4", collective.DefaultShards)
	}
}

func TestConfigValidate(t *testing.T) {
	var c Config
	c.Home = t.TempDir()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.InnerSteps != Q2Point.InnerSteps || c.Run != "default" || c.RingOrder != "latency" || c.OuterLR != Q2Point.OuterLR || *c.CloseFraction != DefaultCloseFraction || *c.OuterMomentum != Q2Point.OuterMomentum || c.Tick != 100*time.Millisecond {
		t.Fatalf("defaults not filled: %+v", c)
	}
	open := Config{Home: t.TempDir(), StatusAddr: "0.0.0.0:0", StatusToken: "0123456789abcdef"}
	if err := open.Validate(); err != nil {
		t.Fatalf("non-loopback status with a token: %v", err)
	}
	for _, mu := range []float32{0, 0.9} {
		z := Config{Home: t.TempDir(), OuterMomentum: new(mu)}
		if err := z.Validate(); err != nil || *z.OuterMomentum != mu {
			t.Fatalf("momentum %v asked for, got %v (%v)", mu, *z.OuterMomentum, err)
		}
	}
	bad := []func(*Config){
		func(c *Config) { c.OuterMomentum = new(float32(-0.1)) },
		func(c *Config) { c.OuterLR = -1 },
		func(c *Config) { c.InnerSteps = -1 },
		func(c *Config) { c.MinMembers = -2 },
		func(c *Config) { c.Shards = 65 },
		func(c *Config) { c.OuterMomentum = new(float32(1)) },
		func(c *Config) { c.StatusAddr = "nonsense" },
		func(c *Config) { c.StatusAddr = "0.0.0.0:8642" },                         // reachable from elsewhere, no token
		func(c *Config) { c.StatusAddr, c.StatusToken = "0.0.0.0:8642", "short" }, // token too short
		func(c *Config) { c.RingOrder = "random" },
		func(c *Config) { c.MaxSendRate = -1 },
		func(c *Config) { c.Device = "sim" }, // needs --sim-step
		func(c *Config) { c.KeepCheckpoints = -1 },
	}
	for i, f := range bad {
		c := Config{Home: t.TempDir()}
		f(&c)
		if err := c.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("case %d: err = %v, want ErrBadConfig", i, err)
		}
	}
}
