package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/internal/nat"
	"github.com/intellect-node/intellect-node/internal/wan"
	"github.com/intellect-node/intellect-node/node"
)

// Ports inside every member's namespace.
const (
	nodePort   = 4001
	statusPort = 8080
	statusAddr = "127.0.0.1:8080"
)

// Polling.
const (
	pollEvery    = 250 * time.Millisecond // /v1/peers of every member
	metricsEvery = 4                      // polls between reads of the public member's /metrics
	restartAfter = time.Second            // between SIGKILL and the restart
)

// member is one site's node process.
type member struct {
	site    int
	name    string
	home    string
	proc    *wan.Proc
	hc      *http.Client
	id      string
	started time.Time
	gone    bool // left or was killed on purpose (not a failure)
	// last successful reads, kept as evidence
	peersJSON, statusJSON []byte
	midPeers              []byte // peersJSON when the run reached the event step
	step                  uint64
}

// labRun is one run of one case.
type labRun struct {
	c       config
	cs      caseSpec
	lab     *nat.Lab
	dir     string
	members []*member
	logs    []*os.File
	pairs   *pairTimer
	relay   relayCount        // the public member's relayed bytes, last read
	metrics []byte            // the public member's last /metrics, kept as evidence
	links   map[[2]int]string // last link state [observer][peer], for trackLink
	fired   bool              // the case's event happened
	notes   []string
}

// runCase builds the case's lab, runs its members to the end (or the
// deadline, or a stall) and returns what they reported. The lab is removed
// before it returns, whatever happened.
func runCase(ctx context.Context, c config, cs caseSpec, run int) (res runResult) {
	res = runResult{Case: cs, Run: run, Dir: filepath.Join(c.Dir, fmt.Sprintf("%s-%d", cs.Name, run))}
	start := time.Now()
	defer func() { res.Wall = time.Since(start) }()
	if err := os.RemoveAll(res.Dir); err != nil {
		res.Err = err
		return res
	}
	if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		res.Err = err
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, c.runTimeout())
	defer cancel()
	lab, err := nat.Start(ctx, nat.WithKinds(c.profile, cs.Kinds...), wan.Options{RateScale: c.rateScale, Log: c.Log})
	if err != nil {
		res.Err = err
		return res
	}
	r := &labRun{c: c, cs: cs, lab: lab, dir: res.Dir, pairs: newPairTimer(len(cs.Kinds))}
	defer r.closeLogs()
	defer lab.Close()
	res.Err = r.startAll(ctx)
	if res.Err == nil {
		res.Err = r.watch(ctx)
	}
	res.Err = errors.Join(res.Err, lab.Close())
	r.collect(&res)
	return res
}

// nodeArgs is site i's command line, without --bootstrap.
func (r *labRun) nodeArgs(i int) []string {
	c := r.c
	args := []string{c.Bin, "start", "--device", "sim", "--sim-step", c.SimStep.String(), "--preset", c.Preset,
		"--inner-steps", fmt.Sprint(c.Inner), "--max-outer-steps", fmt.Sprint(c.Outer),
		"--min-members", fmt.Sprint(len(r.cs.Kinds)), "--status", statusAddr,
		"--home", filepath.Join(r.dir, r.lab.Net.Hosts[i].Name), "--run", "nat-" + r.cs.Name,
		"--checkpoint-every", "1000000"}
	return append(args, c.NodeFlags...)
}

// startAll starts the public member, reads its peer id, then starts the
// others bootstrapping from it.
func (r *labRun) startAll(ctx context.Context) error {
	m0, err := r.startMember(0, nil)
	if err != nil {
		return err
	}
	if err := r.waitID(ctx, m0); err != nil {
		return fmt.Errorf("natlab: %s: %w", m0.name, err)
	}
	boot := r.bootArgs()
	for i := 1; i < len(r.cs.Kinds); i++ {
		if _, err := r.startMember(i, boot); err != nil {
			return err
		}
	}
	for _, m := range r.members[1:] {
		if err := r.waitID(ctx, m); err != nil {
			return fmt.Errorf("natlab: %s: %w", m.name, err)
		}
	}
	return nil
}

// startMember starts site i's node (again, for a restart), logging to
// <dir>/<site>.log, and records its join time.
func (r *labRun) startMember(i int, extra []string) (*member, error) {
	name := r.lab.Net.Hosts[i].Name
	f, err := os.OpenFile(filepath.Join(r.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	r.logs = append(r.logs, f)
	cmd := r.lab.Command(i, append(r.nodeArgs(i), extra...)...)
	cmd.Stdout, cmd.Stderr = f, f
	p, err := r.lab.StartCommand(i, cmd)
	if err != nil {
		return nil, err
	}
	m := &member{site: i, name: name, home: filepath.Join(r.dir, name), proc: p,
		hc: r.lab.HTTPClient(i, time.Second), started: time.Now()}
	if i < len(r.members) {
		m.id = r.members[i].id
		r.members[i] = m
	} else {
		r.members = append(r.members, m)
	}
	r.pairs.join(i, m.started)
	return m, nil
}

// waitID polls m's status API until it reports its peer id.
func (r *labRun) waitID(ctx context.Context, m *member) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var s node.Status
		if err := getJSON(ctx, m.hc, "/v1/status", &s, nil); err == nil && s.PeerID != "" {
			m.id = s.PeerID
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.proc.Done():
			return fmt.Errorf("exited before serving its status: %v", m.proc.Wait())
		case <-tick.C:
		}
	}
}

// getJSON reads path from a member's status API into v, keeping the raw
// body in *raw when raw is not nil.
func getJSON(ctx context.Context, hc *http.Client, path string, v any, raw *[]byte) error {
	body, err := get(ctx, hc, path)
	if err != nil {
		return err
	}
	if raw != nil {
		*raw = body
	}
	return json.Unmarshal(body, v)
}

// get reads path from a member's status API.
func get(ctx context.Context, hc *http.Client, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+statusAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, err
}

func (r *labRun) closeLogs() {
	for _, f := range r.logs {
		f.Close()
	}
}

// signalMember sends sig to member m's process group.
func signalMember(m *member, sig syscall.Signal) error {
	if err := syscall.Kill(-m.proc.Cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("natlab: signal %v to %s: %w", sig, m.name, err)
	}
	return nil
}

// siteOf maps a peer id to its site, -1 when unknown.
func (r *labRun) siteOf(id string) int {
	for _, m := range r.members {
		if m.id == id {
			return m.site
		}
	}
	return -1
}

// note records a line of evidence for the report.
func (r *labRun) note(format string, args ...any) {
	r.notes = append(r.notes, strings.TrimSpace(fmt.Sprintf(format, args...)))
}
