package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/intellect-node/intellect-node/node"
)

func init() {
	register("status", "print a running node's status (reads its local REST API)", runStatus)
	register("peers", "print the peers a running node knows", runPeers)
}

func runStatus(args []string) error {
	fs := newFlagSet("status", "[--status ADDR] [--json] [--watch [--every D]]")
	addr := fs.String("status", node.DefaultStatusAddr, "the node's status API `address`")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	watch := fs.Bool("watch", false, "refresh until interrupted")
	every := fs.Duration("every", 2*time.Second, "with --watch: refresh `interval`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *every < 100*time.Millisecond {
		return fmt.Errorf("--every %v: want at least 100ms", *every)
	}
	c := node.NewClient(*addr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for {
		s, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if *watch && !*asJSON {
			fmt.Print("\033[H\033[2J") // clear the terminal
		}
		if *asJSON {
			err = printJSON(s)
		} else {
			err = printStatus(os.Stdout, s)
		}
		if err != nil || !*watch {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*every):
		}
	}
}

// printStatus writes s as aligned key/value lines.
func printStatus(w io.Writer, s node.Status) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("peer_id", s.PeerID)
	row("run", s.Run)
	row("state", s.State)
	if w := s.Waiting; w != nil {
		row("waiting", fmt.Sprintf("for %d members before the run's first ring, have %d", w.Members, w.Have))
	}
	row("device", s.Device)
	row("preset", fmt.Sprintf("%s (%d params)", s.Preset, s.Params))
	row("outer_step", s.OuterStep)
	row("inner_step", fmt.Sprintf("%d/%d", s.InnerStep, s.InnerSteps))
	row("members", fmt.Sprintf("%d %s", len(s.Members), strings.Join(s.Members, " ")))
	row("loss", fmt.Sprintf("%.4f", s.Loss))
	row("eval_loss", fmt.Sprintf("%.4f", s.EvalLoss))
	row("model_hash", s.ModelHash)
	row("tokens_per_sec", fmt.Sprintf("%.0f", s.TokensPerSec))
	row("compute_utilization", fmt.Sprintf("%.3f", s.ComputeUtilization))
	row("bytes_sent", s.BytesSent)
	row("bytes_received", s.BytesReceived)
	row("last_allreduce_sec", fmt.Sprintf("%.3f", s.LastAllReduceSec))
	if d := s.Download; d != nil {
		row("download", fmt.Sprintf("step %d: %d/%d bytes from %d donors (%d retries)", d.Step, d.BytesDone, d.BytesTotal, d.Donors, d.Retries))
	}
	row("uptime_sec", fmt.Sprintf("%.0f", s.UptimeSec))
	row("addrs", strings.Join(s.Addrs, " "))
	return tw.Flush()
}

func runPeers(args []string) error {
	fs := newFlagSet("peers", "[--status ADDR] [--json]")
	addr := fs.String("status", node.DefaultStatusAddr, "the node's status API `address`")
	asJSON := fs.Bool("json", false, "print the peers as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	peers, err := node.NewClient(*addr).Peers(context.Background())
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(peers)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "PEER\tSTATE\tOUTER\tLATENCY\tLAST SEEN\tCONNECTED\tADDRS")
	for _, p := range peers {
		fmt.Fprintf(w, "%s\t%s\t%d\t%.1f ms\t%s\t%v\t%s\n", p.ID, p.State, p.OuterStep, p.LatencyMs,
			p.LastSeen.Format(time.TimeOnly), p.Connected, strings.Join(p.Addrs, " "))
	}
	return w.Flush()
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
