package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/internal/emu"
)

// TestRunForwards runs the command's main loop on two namespaces prepared
// by hand (the way an operator would, without wanbench), measures a round
// trip through it and reads the counters it prints when stopped.
func TestRunForwards(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("linkemu: needs root to create network namespaces (and not -short)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("linkemu: needs /dev/net/tun: %v", err)
	}
	var tag [4]byte
	rand.Read(tag[:])
	name := fmt.Sprintf("iwan.%d.%s", os.Getpid(), hex.EncodeToString(tag[:])) // wanbench cleanup finds leftovers
	cfg := `{"offload":true,"hosts":[`
	for i, h := range []string{"a", "b"} {
		ns := name + "." + h
		mustIP(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
		mustIP(t, "-n", ns, "link", "set", "lo", "up")
		mustIP(t, "-n", ns, "tuntap", "add", "dev", "wan0", "mode", "tun")
		mustIP(t, "-n", ns, "addr", "add", fmt.Sprintf("10.77.0.%d/24", i+1), "dev", "wan0")
		mustIP(t, "-n", ns, "link", "set", "wan0", "up")
		cfg += fmt.Sprintf(`%s{"name":%q,"netns":%q,"dev":"wan0","addr":"10.77.0.%d"}`,
			map[bool]string{true: ",", false: ""}[i > 0], h, filepath.Join("/var/run/netns", ns), i+1)
	}
	cfg += `],"default":{"delay_ms":15}}`
	path := filepath.Join(t.TempDir(), "topology.json")
	os.WriteFile(path, []byte(cfg), 0o600)

	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, options{config: path}, &out) }()

	rtt := connectTime(t, filepath.Join("/var/run/netns", name+".a"), "10.77.0.2:9")
	t.Logf("connect through linkemu: %v", rtt)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rtt < 30*time.Millisecond || rtt > 50*time.Millisecond {
		t.Errorf("connect took %v, want one 30 ms round trip (+ ≤ 20 ms)", rtt)
	}
	var r emu.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("counters: %v in %q", err, out.String())
	}
	if l, ok := r.Link("a", "b"); !ok || l.Packets == 0 {
		t.Errorf("link a→b carried nothing: %+v", r)
	}
}

// connectTime measures a TCP connect from namespace ns to a closed port:
// the SYN and the refusing RST make one round trip. The first SYN may go
// out before linkemu is attached (TCP retries it) and a busy machine delays
// some, so the fastest of up to five connects counts.
func connectTime(t *testing.T, ns, addr string) time.Duration {
	best := time.Hour
	for try := 0; try < 5 && best > 40*time.Millisecond; try++ {
		err := emu.InNetns(ns, func() error {
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil {
				c.Close()
			}
			best = min(best, time.Since(start))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return best
}

func mustIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}
