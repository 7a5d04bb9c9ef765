package node

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/intellect-node/intellect-node/train"
	"github.com/prometheus/client_golang/prometheus"
)

func TestClientReadsTheAPI(t *testing.T) {
	b := &board{}
	b.update(func(s *Status) { s.PeerID, s.OuterStep, s.Members = "12D3KooWme", 4, []string{"a"} })
	b.setPeers([]PeerStatus{{ID: "p1", State: "training", OuterStep: 4}})
	b.record(OuterRecord{Step: 4, EvalLoss: 1.25})
	a, err := newAPI("127.0.0.1:0", b, newMetrics(prometheus.NewRegistry(), b, nil).handler(), "", false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	go a.serve()
	defer a.close(context.Background())
	ctx := context.Background()
	c := NewClient(a.Addr())
	s, err := c.Status(ctx)
	if err != nil || s.PeerID != "12D3KooWme" || s.OuterStep != 4 {
		t.Fatalf("status %+v, %v", s, err)
	}
	ps, err := c.Peers(ctx)
	if err != nil || len(ps) != 1 || ps[0].State != "training" {
		t.Fatalf("peers %+v, %v", ps, err)
	}
	h, err := NewClient("http://" + a.Addr() + "/").History(ctx)
	if err != nil || len(h) != 1 || h[0].EvalLoss != 1.25 {
		t.Fatalf("history %+v, %v", h, err)
	}
	var used bool
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	if s, err := NewClient(a.Addr(), WithHTTPClient(hc)).Status(ctx); err != nil || !used || s.PeerID != "12D3KooWme" {
		t.Fatalf("WithHTTPClient: status %+v, %v, client used %v", s, err, used)
	}
	var missing []int
	if err := c.get(ctx, "/v1/nothing", &missing); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown path: err %v, want a 404", err)
	}
	a.close(ctx)
	if _, err := c.Status(ctx); err == nil || !strings.Contains(err.Error(), "is a node running there") {
		t.Errorf("stopped node: err %v", err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A checkpoint's progress ends with a report of completion, and the bytes
// on disk are counted from the regular files under the directory.
func TestDirProgress(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "a"), make([]byte, 100), 0o600)
	os.WriteFile(filepath.Join(dir, "sub", "b"), make([]byte, 23), 0o600)
	if got := train.DirBytes(dir); got != 123 {
		t.Fatalf("dirBytes = %d, want 123", got)
	}
	var got []Progress
	n := &Node{cfg: Config{OnProgress: func(p Progress) { got = append(got, p) }}}
	n.dirProgress(dir, 1000, "step 3")()
	if len(got) == 0 || got[len(got)-1] != (Progress{Work: "checkpoint", Done: 1000, Total: 1000, Detail: "step 3"}) {
		t.Fatalf("reports %+v, want a final one of completion", got)
	}
	(&Node{}).dirProgress(dir, 1000, "")() // no OnProgress: nothing to do
}
