package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

func init() {
	register("status", "print a running node's status (reads its local REST API)", runStatus)
	register("peers", "print the peers a running node knows", runPeers)
}

// apiGet fetches path from the node's status API into v.
func apiGet(addr, path string, v any) error {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(addr + path)
	if err != nil {
		return fmt.Errorf("is a node running with --status %s? %w", strings.TrimPrefix(addr, "http://"), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

func runStatus(args []string) error {
	fs := newFlagSet("status", "[--status ADDR] [--json]")
	addr := fs.String("status", "127.0.0.1:8642", "the node's status API `address`")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var s map[string]any
	if err := apiGet(*addr, "/v1/status", &s); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(s)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	for _, k := range []string{"peer_id", "run", "state", "device", "preset", "params", "outer_step", "inner_step",
		"inner_steps", "members", "loss", "eval_loss", "model_hash", "tokens_per_sec", "compute_utilization",
		"bytes_sent", "bytes_received", "last_allreduce_sec", "download", "uptime_sec", "addrs"} {
		v, ok := s[k]
		if !ok || v == nil {
			continue
		}
		fmt.Fprintf(w, "%s\t%s\n", k, show(v))
	}
	return w.Flush()
}

func runPeers(args []string) error {
	fs := newFlagSet("peers", "[--status ADDR] [--json]")
	addr := fs.String("status", "127.0.0.1:8642", "the node's status API `address`")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var peers []map[string]any
	if err := apiGet(*addr, "/v1/peers", &peers); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(peers)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "PEER\tSTATE\tOUTER\tLATENCY\tLAST SEEN\tADDRS")
	for _, p := range peers {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s ms\t%s\t%s\n", show(p["id"]), show(p["state"]), show(p["outer_step"]),
			show(p["latency_ms"]), show(p["last_seen"]), show(p["addrs"]))
	}
	return w.Flush()
}

func show(v any) string {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = show(e)
		}
		return strings.Join(parts, " ")
	case float64:
		if x == float64(int64(x)) && x < 1e15 && x > -1e15 {
			return fmt.Sprintf("%d", int64(x))
		}
		return fmt.Sprintf("%.4g", x)
	case map[string]any:
		b, _ := json.Marshal(x)
		return string(b)
	default:
		return fmt.Sprint(x)
	}
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
