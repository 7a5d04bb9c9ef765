// Command linkemu is a userspace WAN link emulator. It attaches to one TUN
// device per host (each usually in its own network namespace), and forwards
// IPv4 packets between them with a per-link one-way delay, rate limit with a
// drop-tail queue, and seeded random loss, as given by a JSON configuration
// (see package emu's Config). It replaces tc netem on kernels without it.
//
//	linkemu -config topology.json
//
// The TUN devices are created if missing, but addresses, MTU and routes are
// the caller's to set (wanbench does all of it: wanbench config -profile usa
// prints a configuration for the namespaces wanbench makes). SIGHUP re-reads
// the configuration and applies changed links (delays, rates, loss) without
// dropping packets in flight; the hosts must stay the same. SIGINT or
// SIGTERM stops it and prints the link counters as JSON on stdout.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/intellect-node/intellect-node/internal/emu"
)

// options are linkemu's flags.
type options struct {
	config  string
	verbose bool
}

func main() {
	var o options
	flag.StringVar(&o.config, "config", "", "JSON topology file (- for stdin); required")
	flag.BoolVar(&o.verbose, "v", false, "log at debug level")
	flag.Parse()
	if o.config == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkemu:", err)
		os.Exit(1)
	}
}

// run forwards until ctx is done, then writes the counters as JSON to out.
func run(ctx context.Context, o options, out io.Writer) error {
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg, err := load(o.config)
	if err != nil {
		return err
	}
	fwd, err := emu.New(cfg, log)
	if err != nil {
		return err
	}
	go reloadOnHangup(ctx, o.config, cfg, fwd, log)
	log.Info("forwarding", "hosts", len(cfg.Hosts), "mtu", cfg.MTU)
	err = fwd.Run(ctx)
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return errors.Join(err, enc.Encode(fwd.Stats()))
}

func load(path string) (emu.Config, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return emu.Config{}, err
		}
		defer f.Close()
		r = f
	}
	return emu.Decode(r)
}

// reloadOnHangup re-reads the configuration on SIGHUP and applies its links.
func reloadOnHangup(ctx context.Context, path string, old emu.Config, fwd *emu.Forwarder, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if path == "-" {
			log.Warn("reload: configuration came from stdin; nothing to re-read")
			continue
		}
		if err := reload(path, old, fwd); err != nil {
			log.Error("reload", "err", err)
			continue
		}
		log.Info("reloaded links", "config", path)
	}
}

func reload(path string, old emu.Config, fwd *emu.Forwarder) error {
	cfg, err := load(path)
	if err != nil {
		return err
	}
	if !slices.Equal(cfg.Hosts, old.Hosts) || cfg.MTU != old.MTU {
		return fmt.Errorf("hosts or MTU changed; restart linkemu instead")
	}
	m, _ := cfg.Matrix()
	var errs []error
	for i, row := range m {
		for j, l := range row {
			if i != j {
				errs = append(errs, fwd.SetLink(cfg.Hosts[i].Name, cfg.Hosts[j].Name, l))
			}
		}
	}
	return errors.Join(errs...)
}
