package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/intellect-node/intellect-node/cmd/wanbench/wan"
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
	if err != nil {
		return err
	}
	return waitAll(ctx, procs)
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
