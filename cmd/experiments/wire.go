package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/train"
)

// `experiments wire`: what node processes send on every protocol, not only
// the averaging. N real nodes on 127.0.0.1 train with the given flags; the
// libp2p byte counters of each (/metrics, intellect_p2p_bytes_total by
// protocol and direction) are read when the network reaches outer step
// -from and again at -to, and the difference is reported per member per
// inner step and per second, by protocol, with the reduction against fp32
// data-parallel training for the averaging alone and for every protocol
// together.

// wireOptions are the flags of `experiments wire`.
type wireOptions struct {
	bin, work, preset string
	flags             string
	nodes, h          int
	from, to          uint64
	timeout           time.Duration
}

func wireMain(args []string) error {
	var o wireOptions
	fs := flag.NewFlagSet("wire", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "bin/intellect-node", "intellect-node binary")
	fs.StringVar(&o.work, "work", "", "directory for the nodes' homes and logs (default: a new temporary one)")
	fs.StringVar(&o.preset, "preset", "tiny", "model preset")
	fs.StringVar(&o.flags, "node-flags", "", "extra `intellect-node start` flags, space-separated (e.g. '--codec topk')")
	fs.IntVar(&o.nodes, "nodes", 4, "node processes")
	fs.IntVar(&o.h, "h", node.CodecPoint(node.DefaultCodec).InnerSteps, "inner steps per outer step")
	fs.Uint64Var(&o.from, "from", 2, "outer step at which counting starts (after start-up)")
	fs.Uint64Var(&o.to, "to", 12, "outer step at which counting ends")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.to <= o.from || o.nodes < 2 {
		return fmt.Errorf("want -to > -from and -nodes ≥ 2")
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	return runWire(ctx, o, os.Stdout)
}

// runWire starts the nodes, counts and reports.
func runWire(ctx context.Context, o wireOptions, w io.Writer) error {
	if o.work == "" {
		var err error
		if o.work, err = os.MkdirTemp("", "intellect-wire-"); err != nil {
			return err
		}
	}
	s := &setup{work: o.work, bin: o.bin, preset: o.preset}
	var procs []*process
	defer stopAll(&procs)
	boot := ""
	for i := range o.nodes {
		home := filepath.Join(o.work, fmt.Sprintf("node%d", i))
		args := []string{"start", "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0", "--status", "127.0.0.1:0",
			"--run", "wire", "--preset", o.preset, "--inner-steps", fmt.Sprint(o.h), "--min-members", fmt.Sprint(o.nodes),
			"--checkpoint-every", "1000000"}
		args = append(args, strings.Fields(o.flags)...)
		if boot != "" {
			args = append(args, "--bootstrap", boot)
		}
		p, err := s.start(fmt.Sprintf("node%d", i), home, args...)
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
	a, ta, err := countAt(ctx, procs, o.from)
	if err != nil {
		return err
	}
	b, tb, err := countAt(ctx, procs, o.to)
	if err != nil {
		return err
	}
	params, err := presetParams(o.preset)
	if err != nil {
		return err
	}
	writeWire(w, o, params, a, b, tb.Sub(ta))
	return nil
}

// countAt waits until every node is at outer step ≥ step, then reads each
// node's byte counters: protocol|direction → bytes summed over the nodes.
func countAt(ctx context.Context, procs []*process, step uint64) (map[string]float64, time.Time, error) {
	for _, p := range procs {
		if err := waitStep(ctx, p, step); err != nil {
			return nil, time.Time{}, err
		}
	}
	at := time.Now()
	sum := map[string]float64{}
	for _, p := range procs {
		c, err := scrapeBytes(ctx, p)
		if err != nil {
			return nil, at, err
		}
		for k, v := range c {
			sum[k] += v
		}
	}
	return sum, at, nil
}

// waitStep polls a node's status until its outer step reaches step.
func waitStep(ctx context.Context, p *process, step uint64) error {
	addr, err := os.ReadFile(filepath.Join(p.home, "api.addr"))
	if err != nil {
		return err
	}
	c := node.NewClient(strings.TrimSpace(string(addr)))
	for {
		if st, err := c.Status(ctx); err == nil && st.OuterStep >= step {
			return nil
		}
		select {
		case err := <-p.done:
			return fmt.Errorf("%s exited: %v (log %s.log)", p.name, err, p.home)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// scrapeBytes reads intellect_p2p_bytes_total from a node's /metrics.
func scrapeBytes(ctx context.Context, p *process) (map[string]float64, error) {
	addr, err := os.ReadFile(filepath.Join(p.home, "api.addr"))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+strings.TrimSpace(string(addr))+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseBytesMetric(resp.Body)
}

// parseBytesMetric picks the intellect_p2p_bytes_total samples out of a
// Prometheus text exposition: `protocol|direction` → value.
func parseBytesMetric(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "intellect_p2p_bytes_total{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(line, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", sc.Text(), err)
		}
		out[labelValue(labels, "protocol")+"|"+labelValue(labels, "direction")] += v
	}
	return out, sc.Err()
}

// labelValue returns a label's value from `a="x",b="y"`.
func labelValue(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// presetParams is the parameter count of a preset.
func presetParams(preset string) (int64, error) {
	o, err := train.DefaultOptions(preset)
	if err != nil {
		return 0, err
	}
	return o.Model.NumParams(), nil
}

// writeWire reports bytes per member per inner step by protocol, and the
// reductions against data-parallel training.
func writeWire(w io.Writer, o wireOptions, params int64, a, b map[string]float64, took time.Duration) {
	inner := float64(o.to-o.from) * float64(o.h) * float64(o.nodes) // member-inner-steps
	fmt.Fprintf(w, "%d nodes, H = %d, outer steps %d..%d (%.1f s), flags %q\n\n", o.nodes, o.h, o.from, o.to, took.Seconds(), o.flags)
	fmt.Fprintln(w, "| protocol | sent B/member/inner | received B/member/inner | sent B/member/s |")
	fmt.Fprintln(w, "|---|---|---|---|")
	protos := map[string]bool{}
	for k := range b {
		proto, _, _ := strings.Cut(k, "|")
		protos[proto] = true
	}
	var names []string
	for p := range protos {
		names = append(names, p)
	}
	sort.Strings(names)
	var avg, all [2]float64
	for _, p := range names {
		out, in := b[p+"|sent"]-a[p+"|sent"], b[p+"|received"]-a[p+"|received"]
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f |\n", p, out/inner, in/inner, out/float64(o.nodes)/took.Seconds())
		all[0], all[1] = all[0]+out, all[1]+in
		if strings.Contains(p, "scatter") || strings.Contains(p, "allreduce") {
			avg[0], avg[1] = avg[0]+out, avg[1]+in
		}
	}
	dp := ddpBytes(o.nodes, params)
	fmt.Fprintf(w, "\nData-parallel fp32: %.0f B per member per inner step each way.\n", dp)
	fmt.Fprintf(w, "Averaging streams: %.0f× (sent) / %.0f× (received) less; every protocol: %.0f× / %.0f× less.\n",
		dp*inner/avg[0], dp*inner/avg[1], dp*inner/all[0], dp*inner/all[1])
}
