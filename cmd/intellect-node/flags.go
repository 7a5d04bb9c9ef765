package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// errHelp is what parseFlags and parseInterleaved return for -h or --help:
// the usage has gone to standard output and the command has nothing more to
// do; main exits 0.
var errHelp = errors.New("help requested")

// newFlagSet returns a flag set that reports errors instead of exiting, with
// a usage line naming the subcommand.
func newFlagSet(name, args string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: intellect-node %s %s\n", name, args)
		if hasFlags(fs) {
			fmt.Fprint(fs.Output(), "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseFlags parses args and rejects stray positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseQuiet(fs, func() error { return fs.Parse(args) }); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	return nil
}

// parseQuiet runs parse with fs's messages held back: on -h or --help the
// usage goes to standard output and errHelp is returned; on a bad flag the
// message and the usage go to fs's own output (standard error unless set).
func parseQuiet(fs *flag.FlagSet, parse func() error) error {
	errOut := fs.Output()
	var msg bytes.Buffer
	fs.SetOutput(&msg)
	defer fs.SetOutput(errOut)
	err := parse()
	if errors.Is(err, flag.ErrHelp) {
		_, _ = msg.WriteTo(os.Stdout)
		return errHelp
	}
	_, _ = msg.WriteTo(errOut)
	return err
}

// newLogger returns a text logger at the given level ("debug", "info", "warn", "error").
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if w == nil {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// optFloat32 is a float flag that remembers whether it was given, so that
// 0 can be asked for where an absent flag means "the default".
type optFloat32 struct{ p **float32 }

func (o optFloat32) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return fmt.Sprint(**o.p)
}

func (o optFloat32) Set(v string) error {
	var f float32
	if _, err := fmt.Sscan(v, &f); err != nil {
		return fmt.Errorf("not a number: %q", v)
	}
	*o.p = &f
	return nil
}

// readSmallFile reads a file of at most limit bytes.
func readSmallFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes", path, limit)
	}
	return b, nil
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, which it returns; everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	err := parseQuiet(fs, func() error {
		for {
			if err := fs.Parse(args); err != nil {
				return err
			}
			rest := fs.Args()
			if len(rest) == 0 {
				return nil
			}
			if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
				pos = append(pos, rest...)
				return nil
			}
			pos, args = append(pos, rest[0]), rest[1:]
		}
	})
	return pos, err
}

// float32Flag is a float32 flag; it prints nothing while zero (the node's
// default applies).
type float32Flag struct{ p *float32 }

func (o float32Flag) String() string {
	if o.p == nil || *o.p == 0 {
		return ""
	}
	return fmt.Sprint(*o.p)
}

func (o float32Flag) Set(v string) error {
	f, err := strconv.ParseFloat(v, 32)
	if err != nil {
		return fmt.Errorf("not a number: %q", v)
	}
	*o.p = float32(f)
	return nil
}
