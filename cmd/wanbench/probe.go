package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/intellect-node/intellect-node/internal/wan"
)

func cmdProbe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	var nf netFlags
	nf.register(fs)
	count := fs.Int("count", 5, "round trips per pair")
	size := fs.Int64("bytes", 0, "also send this many bytes one way per pair and report the rate the link carried (0: RTT only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, o, err := nf.resolve()
	if err != nil {
		return err
	}
	n, err := wan.Start(ctx, p, o)
	if err != nil {
		return err
	}
	defer n.Close()
	printProfile(p, o.RateScale)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pair\tRTT set ms\tRTT median ms\tRTT min ms\tlink rate MiB/s\tcarried MiB/s\tcarried/rate\t")
	for a := range n.Hosts {
		for b := a + 1; b < len(n.Hosts); b++ {
			if err := probePair(ctx, tw, n, a, b, *count, *size, o.RateScale); err != nil {
				return err
			}
		}
	}
	return tw.Flush()
}

// probePair measures one pair's round trip and, if size > 0, its rate a→b.
func probePair(ctx context.Context, tw *tabwriter.Writer, n *wan.Net, a, b, count int, size int64, scale float64) error {
	ha, hb := n.Hosts[a], n.Hosts[b]
	q := pathOf(n.Profile, ha.Name, hb.Name)
	s, err := n.RTT(ctx, a, b, count)
	if err != nil {
		return fmt.Errorf("%s–%s: %w", ha.Name, hb.Name, err)
	}
	fmt.Fprintf(tw, "%s–%s\t%g\t%.1f\t%.1f\t", ha.Name, hb.Name, q.RTTMS, ms(s[len(s)/2]), ms(s[0]))
	if size <= 0 || q.RateMbit == 0 {
		fmt.Fprintln(tw, "\t\t\t")
		return nil
	}
	set := q.RateMbit * scale * 1e6 / 8
	got, err := n.WireRate(ctx, a, b, size)
	if err != nil {
		return fmt.Errorf("%s→%s: %w", ha.Name, hb.Name, err)
	}
	fmt.Fprintf(tw, "%.2f\t%.2f\t%.3f\t\n", set/(1<<20), got/(1<<20), got/set)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
