package node

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The exposition passes Prometheus' own lint (names, units, help, counter
// suffixes) and parses as the text format, with every family present.
func TestMetricsExposition(t *testing.T) {
	b := &board{}
	b.update(func(s *Status) {
		s.OuterStep, s.InnerSteps, s.Members, s.EvalLoss = 3, 5, []string{"a", "b"}, 1.5
		s.Download = &Download{BytesDone: 25, BytesTotal: 100}
		s.TokensBySource = map[string]int64{"web": 4096, "code": 1024}
	})
	b.setPeers([]PeerStatus{{ID: "x", State: "training"}, {ID: "y", State: "training"}, {ID: "z", State: "left"}})
	bw := func() map[protocol.ID]p2p.Traffic {
		return map[protocol.ID]p2p.Traffic{"/intellect/allreduce/1.0.0": {In: 10, Out: 20}, "": {In: 1}}
	}
	m := newMetrics(prometheus.NewRegistry(), b, bw)
	m.outerDone(1500*time.Millisecond, 200*time.Millisecond, 2)
	m.arFailures.WithLabelValues(failureCause(&collective.PeerError{Rank: 1, Err: errors.New("x")})).Inc()
	m.ckptSeconds.Observe(0.05)
	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, f := range fams {
		expfmt.MetricFamilyToText(&text, f)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(text.String()))
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	for _, name := range []string{"intellect_outer_steps_total", "intellect_outer_step_duration_seconds",
		"intellect_allreduce_duration_seconds", "intellect_allreduce_failures_total", "intellect_model_fetch_duration_seconds",
		"intellect_checkpoint_duration_seconds", "intellect_p2p_bytes_total", "intellect_peers", "intellect_eval_loss",
		"intellect_model_fetch_progress_ratio", "go_goroutines", "process_cpu_seconds_total"} {
		if parsed[name] == nil {
			t.Errorf("family %s missing", name)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"intellect_peers", map[string]string{"state": "training"}, 2},
		{"intellect_allreduce_failures_total", map[string]string{"cause": "peer"}, 1},
		{"intellect_allreduce_failures_total", map[string]string{"cause": "timeout"}, 0},
		{"intellect_allreduce_attempts_total", nil, 2},
		{"intellect_p2p_bytes_total", map[string]string{"direction": "sent", "protocol": "/intellect/allreduce/1.0.0"}, 20},
		{"intellect_p2p_bytes_total", map[string]string{"direction": "received", "protocol": "unnegotiated"}, 1},
		{"intellect_model_fetch_progress_ratio", nil, 0.25},
		{"intellect_outer_step", nil, 3},
		{"intellect_data_tokens_total", map[string]string{"source": "code"}, 1024},
	} {
		if got, ok := metricValue(parsed[c.name], c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.outerSeconds); n != 1 {
		t.Errorf("outer step histogram: %d series", n)
	}
}

// metricValue finds the sample of f whose labels include labels.
func metricValue(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func TestFailureCause(t *testing.T) {
	for err, want := range map[error]string{
		&deadMemberError{peer: "x"}:   "peer",
		&ring.PeerError{Rank: 2}:      "peer",
		context.DeadlineExceeded:      "timeout",
		context.Canceled:              "canceled",
		errors.New("something broke"): "other",
	} {
		if got := failureCause(err); got != want {
			t.Errorf("failureCause(%v) = %s, want %s", err, got, want)
		}
	}
}

// Every intellect_ metric the Grafana dashboard (docs/grafana-dashboard.json)
// queries exists: a renamed metric must take the dashboard along.
func TestDashboardNamesExist(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	b := &board{}
	b.setPeers([]PeerStatus{{State: "training"}})
	b.update(func(s *Status) { s.Download = &Download{BytesTotal: 1} })
	m := newMetrics(prometheus.NewRegistry(), b, func() map[protocol.ID]p2p.Traffic { return map[protocol.ID]p2p.Traffic{"x": {}} })
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	name := regexp.MustCompile(`intellect_[a-z0-9_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, ref := range name.FindAllString(tg.Expr, -1) {
				n++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(ref, "_bucket"), "_sum"), "_count")
				if !have[base] {
					t.Errorf("panel %q queries %s, which the node does not export", p.Title, ref)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d metric references found in the dashboard", n)
	}
}
