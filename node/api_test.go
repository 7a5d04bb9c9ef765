package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestIsLocalHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:1": true, "LOCALHOST": true, "[::1]:9": true, "127.5.5.5": true,
		"localhost.:80": true, "evil.com": false, "evil.com:80": false, "10.0.0.1:80": false,
		"localhost.evil.com": false, "": false, "[::2]:1": false,
	} {
		if got := isLocalHost(host); got != want {
			t.Errorf("isLocalHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestAPIServesAndRejectsNonLocal(t *testing.T) {
	b := &board{}
	b.update(func(s *Status) { s.PeerID = "12D3KooWtest"; s.OuterStep = 7; s.Members = []string{"a", "b"} })
	b.record(OuterRecord{Step: 7, Loss: 1.5})
	met := newMetrics(prometheus.NewRegistry(), b, nil)
	a, err := newAPI("127.0.0.1:0", b, met.handler(), "", false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	go a.serve()
	defer a.close(context.Background())
	base := "http://" + a.Addr()
	cl := &http.Client{Timeout: 5 * time.Second}

	var s Status
	getJSON(t, cl, base+"/v1/status", &s)
	if s.PeerID != "12D3KooWtest" || s.OuterStep != 7 || len(s.Members) != 2 {
		t.Fatalf("status = %+v", s)
	}
	var h []OuterRecord
	getJSON(t, cl, base+"/v1/history", &h)
	if len(h) != 1 || h[0].Loss != 1.5 {
		t.Fatalf("history = %+v", h)
	}
	body := get(t, cl, base+"/metrics", nil, http.StatusOK)
	if !strings.Contains(body, "intellect_outer_step 7") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("metrics missing outer step or Go runtime:\n%s", body)
	}
	if page := get(t, cl, base+"/", nil, http.StatusOK); !strings.Contains(page, "<canvas") {
		t.Fatal("web page has no plots")
	}
	get(t, cl, base+"/v1/status", map[string]string{"Host": "evil.example:80"}, http.StatusForbidden)
	get(t, cl, base+"/v1/status", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden)
	get(t, cl, base+"/v1/status", map[string]string{"Origin": "http://localhost:3000"}, http.StatusOK)
	get(t, cl, base+"/nope", nil, http.StatusNotFound)
}

func get(t *testing.T, cl *http.Client, url string, hdr map[string]string, want int) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s %v: status %d, want %d: %s", url, hdr, resp.StatusCode, want, b)
	}
	return string(b)
}

func getJSON(t *testing.T, cl *http.Client, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(get(t, cl, url, nil, http.StatusOK)), v); err != nil {
		t.Fatal(err)
	}
}

// A lone node has no peers and no history: the API answers [] (the page
// iterates over it), not null.
func TestAPIEmptyListsAreArrays(t *testing.T) {
	b := &board{}
	a, err := newAPI("127.0.0.1:0", b, newMetrics(prometheus.NewRegistry(), b, nil).handler(), "", false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	go a.serve()
	defer a.close(context.Background())
	cl := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/v1/peers", "/v1/history"} {
		if body := strings.TrimSpace(get(t, cl, "http://"+a.Addr()+path, nil, http.StatusOK)); body != "[]" {
			t.Errorf("%s = %q, want []", path, body)
		}
	}
	// A typed decode keeps [] as an empty slice and turns null into nil.
	var s Status
	getJSON(t, cl, "http://"+a.Addr()+"/v1/status", &s)
	if s.Members == nil || s.Addrs == nil {
		t.Errorf("status has null lists: members %#v addrs %#v", s.Members, s.Addrs)
	}
}

// With a token, requests from elsewhere that carry it are served, wrong
// tokens are refused, and token-less requests keep the loopback checks.
func TestAPIToken(t *testing.T) {
	b := &board{}
	const token = "0123456789abcdef-secret"
	a, err := newAPI("127.0.0.1:0", b, newMetrics(prometheus.NewRegistry(), b, nil).handler(), token, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	go a.serve()
	defer a.close(context.Background())
	cl := &http.Client{Timeout: 5 * time.Second}
	url := "http://" + a.Addr() + "/v1/status"
	get(t, cl, url, map[string]string{"Host": "node.example:8642", "Authorization": "Bearer " + token}, http.StatusOK)
	get(t, cl, url, map[string]string{"Host": "node.example:8642", "Authorization": "Bearer wrong"}, http.StatusForbidden)
	get(t, cl, url, map[string]string{"Host": "127.0.0.1", "Authorization": "Bearer " + token + "x"}, http.StatusForbidden)
	get(t, cl, url, map[string]string{"Host": "node.example:8642"}, http.StatusForbidden)
	get(t, cl, url, nil, http.StatusOK)
	get(t, cl, "http://"+a.Addr()+"/metrics", map[string]string{"Host": "prom.example", "Authorization": "Bearer " + token}, http.StatusOK)
}

// Runtime profiles are served only when asked for, under the same access
// rules as the rest of the API.
func TestAPIPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		b := &board{}
		a, err := newAPI("127.0.0.1:0", b, newMetrics(prometheus.NewRegistry(), b, nil).handler(), "", on, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		go a.serve()
		cl := &http.Client{Timeout: 10 * time.Second}
		base := "http://" + a.Addr() + "/debug/pprof/"
		if !on {
			get(t, cl, base+"heap", nil, http.StatusNotFound)
			a.close(context.Background())
			continue
		}
		if body := get(t, cl, base+"heap?debug=1", nil, http.StatusOK); !strings.Contains(body, "heap profile:") {
			t.Errorf("heap profile: %.80q", body)
		}
		if body := get(t, cl, base+"goroutine?debug=1", nil, http.StatusOK); !strings.Contains(body, "goroutine profile:") {
			t.Errorf("goroutine profile: %.80q", body)
		}
		if body := get(t, cl, base, nil, http.StatusOK); !strings.Contains(body, "heap") {
			t.Errorf("index: %.80q", body)
		}
		get(t, cl, base+"heap", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden)
		a.close(context.Background())
	}
}
