package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/node"
)

// watch polls every member until all have exited, the run stalls or ctx
// ends: /v1/peers for the pair timings, /v1/status for the steps (and the
// case's event), the public member's /metrics for the relayed bytes.
func (r *labRun) watch(ctx context.Context) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	lastStep, progress := uint64(0), time.Now() // highest step of any member
	var restartAt time.Time
	for n := 0; ; n++ {
		now := time.Now()
		r.pollPeers(ctx, now)
		if n%metricsEvery == 0 {
			r.pollRelay(ctx)
		}
		if s := r.pollSteps(ctx); s > lastStep {
			if lastStep < r.c.EventStep && s >= r.c.EventStep {
				r.snapshot()
			}
			lastStep, progress = s, now
		}
		if restartAt.IsZero() {
			restartAt = r.maybeFire(now)
		} else if now.After(restartAt) && r.cs.Event == restart && r.members[r.cs.EventSite].gone {
			if err := r.restartMember(); err != nil {
				return err
			}
		}
		switch {
		case r.allDone():
			return nil
		case now.Sub(progress) > r.c.Stall:
			r.note("stalled: no member advanced past outer step %d for %v", lastStep, r.c.Stall)
			return fmt.Errorf("%w: stalled at outer step %d", ErrRun, lastStep)
		}
		select {
		case <-ctx.Done():
			r.note("deadline: %v", ctx.Err())
			return fmt.Errorf("%w: %v at outer step %d", ErrRun, ctx.Err(), lastStep)
		case <-tick.C:
		}
	}
}

// pollPeers reads every live member's /v1/peers and feeds the pair timer.
func (r *labRun) pollPeers(ctx context.Context, now time.Time) {
	for _, m := range r.members {
		if m.gone || isDone(m) {
			continue
		}
		var peers []node.PeerStatus
		if err := getJSON(ctx, m.hc, "/v1/peers", &peers, &m.peersJSON); err != nil {
			continue
		}
		for _, p := range peers {
			if j := r.siteOf(p.ID); j >= 0 && j != m.site && !r.members[j].gone {
				r.pairs.observe(m.site, j, p.Connected && !p.Relayed, now)
				r.trackLink(m, j, p, now)
			}
		}
	}
}

// pollSteps reads every live member's /v1/status and returns the highest
// outer step over the members still training (progress of any member).
func (r *labRun) pollSteps(ctx context.Context) uint64 {
	high := uint64(0)
	for _, m := range r.members {
		if m.gone || isDone(m) {
			continue
		}
		var s node.Status
		if err := getJSON(ctx, m.hc, "/v1/status", &s, &m.statusJSON); err == nil {
			m.step = s.OuterStep
		}
		high = max(high, m.step)
	}
	return high
}

// pollRelay reads the public member's relayed bytes from its /metrics.
func (r *labRun) pollRelay(ctx context.Context) {
	m := r.members[0]
	if m.gone || isDone(m) {
		return
	}
	body, err := get(ctx, m.hc, "/metrics")
	if err != nil {
		return
	}
	if v, err := relayBytes(bytes.NewReader(body)); err == nil {
		r.relay = relayCount{Streams: max(r.relay.Streams, v.Streams), Service: max(r.relay.Service, v.Service)}
	}
	r.metrics = body
}

// maybeFire runs the case's event once every member has reached the event
// step; for a restart it returns when to start the member again.
func (r *labRun) maybeFire(now time.Time) time.Time {
	if r.fired || r.cs.Event == noEvent {
		return time.Time{}
	}
	for _, m := range r.members {
		if m.step < r.c.EventStep {
			return time.Time{}
		}
	}
	r.fired = true
	m := r.members[r.cs.EventSite]
	r.savePeers(m, "before-event")
	m.gone = true
	if r.cs.Event == leave {
		r.note("%s: SIGINT at outer step %d", m.name, m.step)
		signalMember(m, syscall.SIGINT)
		return time.Time{}
	}
	r.note("%s: SIGKILL at outer step %d", m.name, m.step)
	signalMember(m, syscall.SIGKILL)
	return now.Add(restartAfter)
}

// restartMember starts the killed member again with the same home.
func (r *labRun) restartMember() error {
	old := r.members[r.cs.EventSite]
	<-old.proc.Done()
	m, err := r.startMember(old.site, r.bootArgs())
	if err != nil {
		return err
	}
	r.note("%s: restarted with its home", m.name)
	return nil
}

// bootArgs is --bootstrap to the public member.
func (r *labRun) bootArgs() []string {
	return []string{"--bootstrap", fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", r.lab.Topology.MemberAddr(0), nodePort, r.members[0].id)}
}

func isDone(m *member) bool {
	select {
	case <-m.proc.Done():
		return true
	default:
		return false
	}
}

// allDone reports whether every member has exited (after a restart, the
// new process counts).
func (r *labRun) allDone() bool {
	for _, m := range r.members {
		if !isDone(m) {
			return false
		}
	}
	return !(r.cs.Event == restart && r.fired && r.members[r.cs.EventSite].gone)
}

// snapshot keeps every member's current /v1/peers as the run's mid-run
// evidence (taken when the first member reaches the event step) and saves it.
func (r *labRun) snapshot() {
	for _, m := range r.members {
		m.midPeers = m.peersJSON
		r.savePeers(m, "mid")
	}
}

// savePeers writes m's last /v1/peers and /v1/status bodies as evidence.
func (r *labRun) savePeers(m *member, tag string) {
	base := filepath.Join(r.dir, m.name+"."+tag)
	if m.peersJSON != nil {
		os.WriteFile(base+".peers.json", m.peersJSON, 0o644)
	}
	if m.statusJSON != nil {
		os.WriteFile(base+".status.json", m.statusJSON, 0o644)
	}
}

// peerLines describes m's view of the others mid-run (else its last), e.g.
// "dfw sees sfo (training, step 3): connected tcp direct; chi (...): not connected".
func (r *labRun) peerLines(m *member) string {
	var peers []node.PeerStatus
	raw := m.midPeers
	if raw == nil {
		raw = m.peersJSON
	}
	if raw == nil || json.Unmarshal(raw, &peers) != nil {
		return m.name + ": no /v1/peers read"
	}
	var parts []string
	for _, p := range peers {
		name := p.ID
		if j := r.siteOf(p.ID); j >= 0 {
			name = r.members[j].name
		}
		parts = append(parts, fmt.Sprintf("%s (%s, step %d): %s", name, p.State, p.OuterStep, linkOf(p)))
	}
	return m.name + " sees " + strings.Join(parts, "; ")
}

// linkOf describes a peer's link as /v1/peers reports it, e.g. "direct tcp",
// "RELAYED tcp (connected=false)", with its last hole punch if any.
func linkOf(p node.PeerStatus) string {
	how := "not connected"
	switch {
	case p.Relayed:
		how = fmt.Sprintf("RELAYED %s (connected=%v)", p.Transport, p.Connected)
	case p.Connected:
		how = "direct " + p.Transport
	}
	if p.Punch != nil {
		e := strings.ReplaceAll(p.Punch.Error, "\n", " ")
		if len(e) > 160 {
			e = e[:160] + "…"
		}
		how += fmt.Sprintf(" [last punch ok=%v after %v %s]", p.Punch.Success, p.Punch.Took.Round(time.Millisecond), e)
	}
	return how
}

// trackLink notes every change of the link member m reports to site j
// (transport, relayed, connected), with the time since the run started:
// the timeline of each pair's connection, as evidence.
func (r *labRun) trackLink(m *member, j int, p node.PeerStatus, now time.Time) {
	state := "not connected"
	switch {
	case p.Relayed:
		state = "relayed " + p.Transport
	case p.Connected:
		state = "direct " + p.Transport
	}
	key := [2]int{m.site, j}
	if r.links == nil {
		r.links = map[[2]int]string{}
	}
	if old, ok := r.links[key]; ok && old == state || !ok && state == "not connected" {
		return
	}
	r.links[key] = state
	r.note("t+%.1fs %s→%s: %s", now.Sub(r.members[0].started).Seconds(), m.name, r.members[j].name, state)
}
