package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/intellect-node/intellect-node/internal/wan"
)

func cmdRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var nf netFlags
	nf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: wanbench run [flags] -- CMD ARGS...\n\n"+
			"Runs CMD on every host; {host} {index} {addr} {netns} {addrK} in ARGS are\n"+
			"replaced per host, and WAN_HOST, WAN_INDEX, WAN_ADDR, WAN_ADDRS, WAN_RUN,\n"+
			"WAN_NETNS are set. Output lines are prefixed with the host's name. It\n"+
			"returns when every command has exited, or on Ctrl-C.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return flag.ErrHelp
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
	procs, err := n.StartAll(fs.Args(), func(i int) io.Writer { return newPrefixWriter(os.Stdout, n.Hosts[i].Name) })
	if err == nil {
		err = waitAll(ctx, procs)
	}
	printStats(n)
	return err
}

// printStats prints what every link carried and dropped, and the packets
// each host's TUN dropped because the forwarder fell behind.
func printStats(n *wan.Net) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "link	packets	MiB	queue drops	loss drops	")
	for _, l := range n.Forwarder().Stats().Links {
		if l.Offered > 0 {
			fmt.Fprintf(tw, "%s→%s	%d	%.2f	%d	%d	\n", l.From, l.To, l.Packets, float64(l.Bytes)/(1<<20), l.QueueDrops, l.LossDrops)
		}
	}
	tw.Flush()
	for i, h := range n.Hosts {
		if d, err := n.HostDrops(i); err != nil || d > 0 {
			fmt.Fprintf(os.Stderr, "%s: %d packets dropped at wan0 before the emulator (%v): the machine was too busy\n", h.Name, d, err)
		}
	}
}

// waitAll waits until every process has exited or ctx is done, and reports
// how each ended.
func waitAll(ctx context.Context, procs []*wan.Proc) error {
	var errs []error
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-ctx.Done():
			return nil // Close stops the rest
		}
		if err := p.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Host.Name, err))
		}
		fmt.Fprintf(os.Stderr, "%s: exited (%v)\n", p.Host.Name, p.Cmd.ProcessState)
	}
	return errors.Join(errs...)
}
