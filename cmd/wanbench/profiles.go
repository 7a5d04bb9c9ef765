package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/intellect-node/intellect-node/internal/wan"
)

func cmdProfiles(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("profiles", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the profiles as JSON (usable with -profile-file)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(wan.Profiles())
	}
	for _, p := range wan.Profiles() {
		printProfile(p, 1)
	}
	return nil
}

// printProfile prints the RTT / rate matrix of p with rates times scale.
func printProfile(p wan.Profile, scale float64) {
	fmt.Printf("%s: %s\n", p.Name, p.About)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	var head strings.Builder
	head.WriteString("RTT ms / Mbit/s\t")
	for _, h := range p.Hosts {
		head.WriteString(h.Name + "\t")
	}
	fmt.Fprintln(tw, head.String())
	for i, a := range p.Hosts {
		fmt.Fprintf(tw, "%s (%s)\t", a.Name, wan.Addr(i))
		for _, b := range p.Hosts {
			if a.Name == b.Name {
				fmt.Fprint(tw, "-\t")
				continue
			}
			q := pathOf(p, a.Name, b.Name)
			fmt.Fprintf(tw, "%g / %.4g\t", q.RTTMS, q.RateMbit*scale)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Println()
}

// pathOf finds the path between a and b (Validate guarantees one).
func pathOf(p wan.Profile, a, b string) wan.Path {
	for _, q := range p.Paths {
		if (q.A == a && q.B == b) || (q.A == b && q.B == a) {
			return q
		}
	}
	return *p.Default
}

func cmdConfig(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	var nf netFlags
	nf.register(fs)
	run := fs.String("run", "iwan.0.manual", "run name: namespaces are <run>.<host>")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, o, err := nf.resolve()
	if err != nil {
		return err
	}
	paths := make([]string, len(p.Hosts))
	for i, h := range p.Hosts {
		paths[i] = filepath.Join(wan.NetnsDir, *run+"."+h.Name)
	}
	cfg, err := p.Config(paths, o)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(cfg)
}

func cmdCleanup(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	all := fs.Bool("all", false, "also delete namespaces of runs whose process still runs")
	prefix := fs.String("prefix", wan.DefaultPrefix, "name prefix of the namespaces")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var nf netFlags
	nf.verbose = true
	deleted, err := wan.Cleanup(*prefix, *all, nf.logger())
	fmt.Printf("deleted %d namespaces\n", len(deleted))
	return err
}
