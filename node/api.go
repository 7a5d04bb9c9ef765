package node

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strconv"
	"strings"
	"time"
)

//go:embed page.html
var pageHTML []byte

// api serves the local REST status API and web page:
//
//	GET /v1/status   Status
//	GET /v1/peers    []PeerStatus
//	GET /v1/history  []OuterRecord
//	GET /metrics     Prometheus exposition (node/metrics.go)
//	GET /            web page with plots of loss, members and sync time
//	GET /debug/pprof/ Go's runtime profiles (heap, goroutine, CPU, …), with
//	                  Config.Pprof only
//
// Requests whose Host or Origin is not local are rejected (DNS rebinding and
// cross-site reads), whatever address the server listens on.
type api struct {
	b   *board
	log *slog.Logger
	srv *http.Server
	ln  net.Listener
}

func newAPI(addr string, b *board, metrics http.Handler, token string, profiles bool, log *slog.Logger) (*api, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node: status API listen %s: %w", addr, err)
	}
	a := &api{b: b, log: log, ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, a.b.snapshot()) })
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, a.b.peerList()) })
	mux.HandleFunc("GET /v1/history", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, a.b.historyList()) })
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(pageHTML)
	})
	if profiles {
		mux.HandleFunc("GET /debug/pprof/", servePprof)
	}
	h := localOnly(mux)
	if token != "" {
		h = tokenOrLocal(token, mux)
	}
	a.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      10 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	return a, nil
}

// servePprof serves net/http/pprof's handlers. A CPU or trace profile runs
// for its ?seconds= (30 by default), longer than the server's write
// timeout: the deadline of those requests moves past it.
func servePprof(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	secs, _ := strconv.Atoi(r.URL.Query().Get("seconds"))
	secs = min(max(secs, 30), 600)
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Duration(secs+10) * time.Second))
	switch name {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default: // the index, or a named profile (heap, goroutine, …)
		pprof.Index(w, r)
	}
}

// Addr is the address the API listens on (useful with port 0).
func (a *api) Addr() string { return a.ln.Addr().String() }

func (a *api) serve() error {
	err := a.srv.Serve(a.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (a *api) close(ctx context.Context) error { return a.srv.Shutdown(ctx) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// localOnly rejects requests whose Host header or Origin is not a loopback name.
func localOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isLocalHost(r.Host) {
			http.Error(w, "forbidden: non-local Host", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || !isLocalHost(u.Host) {
				http.Error(w, "forbidden: non-local Origin", http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// tokenOrLocal serves requests that carry the bearer token from anywhere
// and the others as localOnly does. Browsers never attach such a header on
// their own, so a token-bearing request is not a cross-site or rebinding
// read; the web page sends the token it finds in its URL's #token=.
func tokenOrLocal(token string, h http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	local := localOnly(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if got == "" {
			local.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			http.Error(w, "forbidden: wrong token", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// isLocalHost reports whether hostport names this machine by a loopback name.
func isLocalHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
