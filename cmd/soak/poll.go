package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/internal/soak"
	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/p2p/ckpt"
)

// Polling.
const (
	pollEvery    = time.Second
	peersEvery   = 3  // polls between reads of /v1/peers
	metricsEvery = 10 // polls between reads of the long-lived members' /metrics
	// progressEvery: a progress line is printed this often.
	progressEvery = 30 * time.Second
)

// reading is one poll of one member.
type reading struct {
	s      *slot
	gen    int
	ok     bool
	status node.Status
	peers  []node.PeerStatus
	usage  map[string]float64
}

// poll reads every running member's status every second (peers and
// resources less often) until ctx ends, and keeps samples and ticks.
func (r *runner) poll(ctx context.Context) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	lastLine := time.Duration(0)
	for n := 0; ; n++ {
		rs := r.readAll(ctx, n%peersEvery == 0, n%metricsEvery == 0)
		r.mu.Lock()
		r.record(rs)
		if now := r.now(); now-lastLine >= progressEvery {
			lastLine = now
			fmt.Println("soak:", r.progressLine())
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readAll reads every running member in parallel.
func (r *runner) readAll(ctx context.Context, peers, usage bool) []reading {
	r.mu.Lock()
	var rs []reading
	for _, s := range r.slots {
		if s.state == up {
			rs = append(rs, reading{s: s, gen: s.gen})
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for i := range rs {
		wg.Go(func() { rs[i].read(ctx, peers, usage && rs[i].s.longLived) })
	}
	wg.Wait()
	return rs
}

// read fills one reading from the member's API.
func (rd *reading) read(ctx context.Context, peers, usage bool) {
	c := node.NewClient(statusAddr, node.WithHTTPClient(rd.s.hc))
	var err error
	if rd.status, err = c.Status(ctx); err != nil {
		return
	}
	rd.ok = true
	if peers {
		rd.peers, _ = c.Peers(ctx)
	}
	if usage {
		rd.usage, _ = metrics(ctx, rd.s.hc, soakMetrics)
	}
}

// record turns a round of readings into samples, a tick and resource
// points, learns peer ids and settles pending resumes. Lock held.
func (r *runner) record(rs []reading) {
	now := r.now()
	tick := soak.Tick{T: now}
	for _, rd := range rs {
		s := rd.s
		if !rd.ok || rd.gen != s.gen || s.state != up {
			continue
		}
		tick.Up++
		s.status, s.id = rd.status, rd.status.PeerID
		if rd.peers != nil {
			s.peers = rd.peers
		}
		d := rd.status.Download
		r.rep.Samples = append(r.rep.Samples, soak.Sample{T: now, Member: s.member(), Step: rd.status.OuterStep, Hash: rd.status.ModelHash,
			Syncing: rd.status.State == "syncing" || d != nil && d.BytesDone < d.BytesTotal})
		if r.linked(s) {
			tick.Linked++
		}
		r.settleResume(s)
		r.keepUsage(s, now, rd.usage)
	}
	r.rep.Ticks = append(r.rep.Ticks, tick)
}

// linked reports whether s's last peers show another running member
// connected. Lock held.
func (r *runner) linked(s *slot) bool {
	for _, p := range s.peers {
		if !p.Connected {
			continue
		}
		for _, o := range r.slots {
			if o != s && o.state == up && o.id == p.ID {
				return true
			}
		}
	}
	return false
}

// settleResume checks a restarted member's first status against the
// checkpoint it was killed with. Lock held.
func (r *runner) settleResume(s *slot) {
	if s.resume < 0 {
		return
	}
	rs := &r.rep.Resumes[s.resume]
	s.resume = -1
	rs.FirstStep = s.status.OuterStep
	if rs.HasCheckpoint && rs.FirstStep < rs.Checkpoint {
		rs.Err = fmt.Sprintf("first status at outer step %d, below its newest checkpoint's %d", rs.FirstStep, rs.Checkpoint)
	}
}

func (r *runner) keepUsage(s *slot, now time.Duration, usage map[string]float64) {
	if usage == nil {
		return
	}
	m := r.rep.Usage[s.member()]
	if m == nil {
		m = map[string][]soak.Point{}
		r.rep.Usage[s.member()] = m
	}
	for k, v := range usage {
		m[k] = append(m[k], soak.Point{T: now, V: v})
	}
}

// progressLine says where the run is: members up, steps, the models.
func (r *runner) progressLine() string {
	hashes := map[string]int{}
	var ups []string
	var high uint64
	for _, s := range r.slots {
		if s.state == up && s.status.PeerID != "" {
			ups = append(ups, fmt.Sprintf("%s@%d", s.member(), s.status.OuterStep))
			hashes[s.status.ModelHash]++
			high = max(high, s.status.OuterStep)
		}
	}
	return fmt.Sprintf("t=%v step %d, %d up, %d models: %s", r.now().Round(time.Second), high, len(ups), len(hashes), strings.Join(ups, " "))
}

// soakMetrics are the unlabelled metrics read from /metrics: the
// resources, plus what the scenarios watch.
var soakMetrics = func() []string {
	var m []string
	for _, res := range soak.Resources {
		m = append(m, res.Metric)
	}
	return append(m, "intellect_checkpoint_failures_total", "intellect_checkpoint_duration_seconds_count")
}()

// ckptSentMetric is the labelled series of the checkpoint protocol's bytes
// sent (a donor serving a model), as read by metrics.
var ckptSentMetric = fmt.Sprintf(`intellect_p2p_bytes_total{direction="sent",protocol="%s"}`, ckpt.ProtocolID)

// metrics reads the named series (an unlabelled name, or a name with its
// labels as /metrics prints them) from a member's /metrics.
func metrics(ctx context.Context, hc *http.Client, names []string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+statusAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(io.LimitReader(resp.Body, 16<<20), names)
}

// parseMetrics picks the named series out of Prometheus text.
func parseMetrics(rd io.Reader, names []string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") || !slices.Contains(names, line[:i]) {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// statusJSON is s's last status as JSON, for evidence lines.
func statusJSON(st node.Status) string {
	b, _ := json.Marshal(struct {
		Step  uint64 `json:"step"`
		State string `json:"state"`
		Hash  string `json:"hash"`
	}{st.OuterStep, st.State, st.ModelHash})
	return string(b)
}
