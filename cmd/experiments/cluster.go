package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/node"
)

// errTimeout is returned when a configuration runs past -timeout.
var errTimeout = errors.New("configuration ran past -timeout")

// process is one child process of a configuration.
type process struct {
	name string
	home string
	cmd  *exec.Cmd
	done chan error
}

// configDir is the work sub-directory of configuration c.
func (s *setup) configDir(c config) string { return filepath.Join(s.work, c.Name) }

// runConfig runs configuration c to completion and leaves its histories
// under s.configDir(c).
func runConfig(ctx context.Context, o options, s *setup, c config, log *slog.Logger) error {
	dir := s.configDir(c)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	log.Info("configuration started", "name", c.Name, "load", loadAvg())
	var err error
	if c.Single {
		err = runSingle(ctx, s, c)
	} else {
		err = runCluster(ctx, s, c)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = errTimeout
	}
	log.Info("configuration finished", "name", c.Name, "took", time.Since(start).Round(time.Second), "load", loadAvg(), "err", err)
	return err
}

// start starts the binary with args, logging to <home>.log.
func (s *setup) start(name, home string, args ...string) (*process, error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	logf, err := os.Create(home + ".log")
	if err != nil {
		return nil, err
	}
	p := &process{name: name, home: home, cmd: exec.Command(s.bin, args...), done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.done <- p.cmd.Wait(); logf.Close() }()
	return p, nil
}

// runCluster runs s.nodes node processes of configuration c on 127.0.0.1
// until each has finished s.outer outer steps and left.
func runCluster(ctx context.Context, s *setup, c config) error {
	var procs []*process
	defer stopAll(&procs)
	boot := ""
	for i := range s.nodes {
		home := filepath.Join(s.configDir(c), fmt.Sprintf("node%d", i))
		if err := copyIdentity(s.identityDir(i), home); err != nil {
			return err
		}
		args := []string{"start", "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0", "--status", "127.0.0.1:0",
			"--run", s.run, "--preset", s.preset, "--inner-steps", fmt.Sprint(s.inner),
			"--min-members", fmt.Sprint(s.nodes), "--max-outer-steps", fmt.Sprint(s.outer),
			"--checkpoint-every", "1000000"}
		args = append(args, c.Flags...)
		if boot != "" {
			args = append(args, "--bootstrap", boot)
		}
		p, err := s.start(fmt.Sprintf("%s/node%d", c.Name, i), home, args...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		if boot == "" {
			if boot, err = bootstrapAddr(ctx, p); err != nil {
				return err
			}
		}
	}
	return waitAll(ctx, procs)
}

// runSingle trains one node alone with s.nodes× the micro-batches per step
// (gradient accumulation keeps the held-out batches identical to the DiLoCo
// nodes'), for the same number of optimizer steps: equal tokens.
func runSingle(ctx context.Context, s *setup, c config) error {
	home := filepath.Join(s.configDir(c), "node0")
	steps := s.inner * s.outer
	p, err := s.start(c.Name, home, "train", "--preset", s.preset, "--home", home, "--steps", fmt.Sprint(steps),
		"--grad-accum", fmt.Sprint(s.nodes), "--seed", fmt.Sprint(s.seed), "--json",
		"--eval-every", fmt.Sprint(s.inner), "--log-every", fmt.Sprint(s.inner), "--save-every", fmt.Sprint(steps+1), "--keep", "1")
	if err != nil {
		return err
	}
	var procs = []*process{p}
	defer stopAll(&procs)
	return waitAll(ctx, procs)
}

// waitAll waits until every process has exited; the first failure is returned.
func waitAll(ctx context.Context, procs []*process) error {
	var first error
	for _, p := range procs {
		select {
		case err := <-p.done:
			p.done <- err // stopAll reads it again
			if err != nil && first == nil {
				first = fmt.Errorf("%s: %w (log %s.log)", p.name, err, p.home)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// stopAll terminates the processes still running: SIGTERM, then SIGKILL
// after 10 s.
func stopAll(procs *[]*process) {
	for _, p := range *procs {
		p.cmd.Process.Signal(syscall.SIGTERM) // harmless on a process that has exited
	}
	for _, p := range *procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// copyIdentity copies the pinned identity key into a node's home.
func copyIdentity(from, home string) error {
	b, err := os.ReadFile(filepath.Join(from, "identity.key"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(home, "identity.key"), b, 0o600)
}

// bootstrapAddr waits for the node's API address file, then for its status
// to list a listen address, and returns that address.
func bootstrapAddr(ctx context.Context, p *process) (string, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if addr, err := os.ReadFile(filepath.Join(p.home, "api.addr")); err == nil {
			if a, err := statusAddr(ctx, strings.TrimSpace(string(addr))); err == nil && a != "" {
				return a, nil
			}
		}
		select {
		case err := <-p.done:
			return "", fmt.Errorf("%s exited before serving its status: %v (log %s.log)", p.name, err, p.home)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
	}
}

// statusAddr reads the status of the API at hostport and returns its
// first libp2p address ("" while it has none).
func statusAddr(ctx context.Context, hostport string) (string, error) {
	st, err := node.NewClient(hostport).Status(ctx)
	if err != nil || len(st.Addrs) == 0 {
		return "", err
	}
	return st.Addrs[0], nil
}

// loadAvg returns the 1-minute load average, or "" where it cannot be read.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
