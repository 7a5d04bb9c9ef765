package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

func init() {
	register("admit", "issue an admission ticket to an allowlist run (on the creator's home)", runAdmit)
	register("psk", "create a private run's key: psk new [--out FILE]", runPSK)
	register("id", "print this node's peer id (creating its identity if there is none)", runID)
}

// runAdmit signs a ticket for --peer with the identity of --home, which
// must have created the home's allowlist run, and prints it (or writes it
// to --out).
func runAdmit(args []string) error {
	fs := newFlagSet("admit", "--peer PEERID [--home DIR] [--expires DURATION] [--out FILE]")
	pid := fs.String("peer", "", "the admitted node's peer `id` (it prints it: intellect-node id --home ITS_HOME)")
	home := fs.String("home", "", "the run creator's home `dir` (default ~/"+node.DefaultHome+")")
	ttl := fs.Duration("expires", 0, "the ticket expires after this `duration` (e.g. 720h; 0: never)")
	out := fs.String("out", "", "write the ticket to this `file` (mode 0600) instead of standard output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *pid == "" {
		return errors.New("--peer is required")
	}
	p, err := peer.Decode(*pid)
	if err != nil {
		return fmt.Errorf("--peer %q: %w", *pid, err)
	}
	dir, err := node.ResolveHome(*home)
	if err != nil {
		return err
	}
	t, m, err := node.IssueTicket(dir, p, *ttl)
	if err != nil {
		return err
	}
	until := "never expires"
	if !t.Expires.IsZero() {
		until = "expires " + t.Expires.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(os.Stderr, "ticket admitting %s to run %s (manifest %x…), %s; the member starts with --ticket FILE\n",
		p, m.Run, t.Run[:6], until)
	return writeOut(*out, []byte(t.String()+"\n"))
}

// runPSK is `psk new`: a new private network key in the swarm.key format.
func runPSK(args []string) error {
	fs := newFlagSet("psk", "new [--out FILE]")
	out := fs.String("out", "", "write the key to this `file` (mode 0600, never over an existing file) instead of standard output")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "new" {
		return errors.New("want: intellect-node psk new [--out FILE]")
	}
	key, err := node.NewPSK()
	if err != nil {
		return err
	}
	if *out != "" {
		return node.WritePSKFile(*out, key)
	}
	_, err = os.Stdout.Write(node.EncodePSK(key))
	return err
}

// runID prints the peer id of --home's identity.
func runID(args []string) error {
	fs := newFlagSet("id", "[--home DIR]")
	home := fs.String("home", "", "the node's home `dir` (default ~/"+node.DefaultHome+")")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dir, err := node.ResolveHome(*home)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, _, err := p2p.LoadOrCreateIdentity(dir)
	if err != nil {
		return err
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return err
	}
	fmt.Println(id)
	return nil
}

// writeOut writes b to path with mode 0600, refusing to replace a file, or
// to standard output when path is empty.
func writeOut(path string, b []byte) error {
	if path == "" {
		_, err := os.Stdout.Write(b)
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
