package node

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/intellect-node/intellect-node/mesh/account"
	"github.com/intellect-node/intellect-node/mesh/collective"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/intellect-node/intellect-node/p2p/ring"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the node's Prometheus metrics, served at GET /metrics from a
// registry of the node's own (several nodes may share a process in tests).
// Events (steps, attempts, fetches, checkpoints) are counted as they happen;
// state (step, losses, members, peers, bytes per protocol) is read from the
// board and the host at scrape time.
type metrics struct {
	reg           *prometheus.Registry
	outerSteps    prometheus.Counter
	outerSeconds  prometheus.Histogram
	arSeconds     prometheus.Histogram
	arAttempts    prometheus.Counter
	arFailures    *prometheus.CounterVec
	fetchSeconds  prometheus.Histogram
	fetchFailures *prometheus.CounterVec
	ckptSeconds   prometheus.Histogram
	ckptFailures  prometheus.Counter
	robustFlags   *prometheus.CounterVec
	exclusions    *prometheus.CounterVec
	audits        *prometheus.CounterVec
	reports       *prometheus.CounterVec
}

// durationBuckets spans 1 ms to ≈ 35 min: a tiny model's all-reduce on
// loopback up to a large model's outer step on a slow link.
var durationBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 17)

// newMetrics registers the node's metrics on reg (which may already hold
// libp2p's) and reads state from b and bw (nil: no byte counters).
func newMetrics(reg *prometheus.Registry, b *board, bw func() map[protocol.ID]p2p.Traffic) *metrics {
	f := promFactory{reg}
	m := &metrics{
		reg:           reg,
		outerSteps:    f.counter("intellect_outer_steps_total", "Outer steps this node completed (averaged and applied)."),
		outerSeconds:  f.histogram("intellect_outer_step_duration_seconds", "Wall time of an outer step: inner steps, agreement, all-reduce, outer update, evaluation."),
		arSeconds:     f.histogram("intellect_allreduce_duration_seconds", "Wall time of an outer step's all-reduce, from Ready to the averaged pseudo-gradient (retries included)."),
		arAttempts:    f.counter("intellect_allreduce_attempts_total", "All-reduce attempts, successful or not."),
		arFailures:    f.counterVec("intellect_allreduce_failures_total", "Failed all-reduce attempts by cause.", "cause"),
		fetchSeconds:  f.histogram("intellect_model_fetch_duration_seconds", "Wall time of a model fetch from peers (join, lag or adoption)."),
		fetchFailures: f.counterVec("intellect_model_fetch_failures_total", "Failed model fetches by cause.", "cause"),
		ckptSeconds:   f.histogram("intellect_checkpoint_duration_seconds", "Wall time of writing a checkpoint to disk."),
		ckptFailures:  f.counter("intellect_checkpoint_failures_total", "Checkpoint writes that failed."),
		exclusions:    f.counterVec("intellect_peer_exclusions_total", "Peers this node excluded from the run on evidence of misbehaviour, by reason: weight, flagged, opposed, false_report, audit (robust averaging), equivocation (mesh votes).", "reason"),
		reports:       f.counterVec("intellect_verdict_reports_total", "Segment owners' verdict reports of this node's contributions (robust averaging), by result: consistent, false (the owner is excluded).", "result"),
		audits:        f.counterVec("intellect_audits_total", "Spot checks of other members' segments by this node (robust averaging), by result: passed, failed (the owner is excluded), unanswered.", "result"),
		robustFlags:   f.counterVec("intellect_robust_flags_total", "Other members' contributions this node's segments flagged (robust averaging): chunks clipped hard or rejected, and steps in which a member's contribution pointed against the others' median (opposed).", "verdict"),
	}
	for _, v := range []string{"clipped", "rejected", "opposed"} {
		m.robustFlags.WithLabelValues(v)
	}
	for _, r := range []account.Reason{account.ReasonWeight, account.ReasonFlagged, account.ReasonOpposed, account.ReasonFalseReport, account.ReasonAudit} {
		m.exclusions.WithLabelValues(r.String())
	}
	m.exclusions.WithLabelValues("equivocation")
	for _, v := range []string{"passed", "failed", "unanswered"} {
		m.audits.WithLabelValues(v)
	}
	for _, v := range []string{"consistent", "false"} {
		m.reports.WithLabelValues(v)
	}
	for _, c := range []string{"peer", "timeout", "canceled", "other"} {
		m.arFailures.WithLabelValues(c) // present at 0, so rates and alerts work from the start
	}
	for _, c := range []string{"download", "unusable"} {
		m.fetchFailures.WithLabelValues(c)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		boardCollector{b}, bandwidthCollector{bw})
	return m
}

// promFactory creates and registers metrics on one registry.
type promFactory struct{ reg *prometheus.Registry }

func (f promFactory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f promFactory) counterVec(name, help, label string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	f.reg.MustRegister(c)
	return c
}

func (f promFactory) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: durationBuckets})
	f.reg.MustRegister(h)
	return h
}

// outerDone records a completed outer step.
func (m *metrics) outerDone(wall, allReduce time.Duration, attempts int) {
	m.outerSteps.Inc()
	m.outerSeconds.Observe(wall.Seconds())
	m.arSeconds.Observe(allReduce.Seconds())
	m.arAttempts.Add(float64(attempts))
}

// Descriptions of the state read at scrape time.
var (
	descOuterStep   = prometheus.NewDesc("intellect_outer_step", "Outer step of this node's global model.", nil, nil)
	descInnerStep   = prometheus.NewDesc("intellect_inner_step", "Inner step within the current outer step.", nil, nil)
	descInnerSteps  = prometheus.NewDesc("intellect_inner_steps", "Inner steps per outer step (H).", nil, nil)
	descMembers     = prometheus.NewDesc("intellect_ring_members", "Members of the last decided ring.", nil, nil)
	descLoss        = prometheus.NewDesc("intellect_train_loss", "Training loss of the last inner step (nats per token).", nil, nil)
	descEvalLoss    = prometheus.NewDesc("intellect_eval_loss", "Held-out loss of the global model after the last outer step (nats per token).", nil, nil)
	descTokens      = prometheus.NewDesc("intellect_tokens_per_second", "Training throughput of this node's inner steps.", nil, nil)
	descUtilization = prometheus.NewDesc("intellect_compute_utilization_ratio", "Compute time over wall time of the last outer step.", nil, nil)
	descParams      = prometheus.NewDesc("intellect_model_parameters", "Parameters of the model.", nil, nil)
	descPeers       = prometheus.NewDesc("intellect_peers", "Peers this node knows, by membership state.", []string{"state"}, nil)
	descDownload    = prometheus.NewDesc("intellect_model_fetch_progress_ratio", "Fraction of the model fetched in the current download (absent when none).", nil, nil)
	descDataTokens  = prometheus.NewDesc("intellect_data_tokens_total", "Training tokens drawn from each source of the data since the node started.", []string{"source"}, nil)
	descBytes       = prometheus.NewDesc("intellect_p2p_bytes_total", "Application bytes on libp2p streams by protocol and direction.", []string{"protocol", "direction"}, nil)
)

// boardCollector exports the board's state.
type boardCollector struct{ b *board }

func (c boardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOuterStep, descInnerStep, descInnerSteps, descMembers, descLoss,
		descEvalLoss, descTokens, descUtilization, descParams, descPeers, descDownload, descDataTokens} {
		ch <- d
	}
}

func (c boardCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.snapshot()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	g(descOuterStep, float64(s.OuterStep))
	g(descInnerStep, float64(s.InnerStep))
	g(descInnerSteps, float64(s.InnerSteps))
	g(descMembers, float64(len(s.Members)))
	g(descLoss, s.Loss)
	g(descEvalLoss, s.EvalLoss)
	g(descTokens, s.TokensPerSec)
	g(descUtilization, s.ComputeUtilization)
	g(descParams, float64(s.Params))
	if d := s.Download; d != nil && d.BytesTotal > 0 {
		g(descDownload, float64(d.BytesDone)/float64(d.BytesTotal))
	}
	for src, n := range s.TokensBySource {
		ch <- prometheus.MustNewConstMetric(descDataTokens, prometheus.CounterValue, float64(n), src)
	}
	states := map[string]int{}
	for _, p := range c.b.peerList() {
		states[p.State]++
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, float64(n), st)
	}
}

// bandwidthCollector exports the host's byte counters per protocol.
type bandwidthCollector struct {
	bw func() map[protocol.ID]p2p.Traffic
}

func (c bandwidthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descBytes }

func (c bandwidthCollector) Collect(ch chan<- prometheus.Metric) {
	if c.bw == nil {
		return
	}
	for proto, t := range c.bw() {
		name := string(proto)
		if name == "" {
			name = "unnegotiated"
		}
		name = strings.ToValidUTF8(name, "?")
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(t.Out), name, "sent")
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(t.In), name, "received")
	}
}

// handler serves the registry in the Prometheus exposition formats.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// failureCause classifies a failed all-reduce attempt for its counter.
func failureCause(err error) string {
	var dead *deadMemberError
	var pe *collective.PeerError
	var rpe *ring.PeerError
	switch {
	case errors.As(err, &dead) || errors.As(err, &pe) || errors.As(err, &rpe):
		return "peer"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}
