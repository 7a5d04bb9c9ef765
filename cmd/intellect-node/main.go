// Command intellect-node runs a node of the intellect-node training network and
// its helper subcommands. It parses flags and calls into the packages; nothing else.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand. run receives the arguments after the subcommand's
// name and returns an error to print (errHelp: the usage was asked for and
// printed); it is registered by its file's init.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("intellect-node: command registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: intellect-node <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'intellect-node <command> -h' (or 'intellect-node help <command>') for a command's flags;\n'intellect-node --version' prints the version.")
}

func main() { os.Exit(run(os.Args[1:])) }

// run runs the command line args and returns the exit status: 0 on success
// and for help, 1 when the command fails, 2 for no or an unknown command.
func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) == 1 {
			usage(os.Stdout)
			return 0
		}
		args = []string{args[1], "-h"}
	case "-version", "--version":
		args = []string{"version"}
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "intellect-node: unknown command %q\n\n", args[0])
		usage(os.Stderr)
		return 2
	}
	if err := c.run(args[1:]); err != nil && !errors.Is(err, errHelp) {
		fmt.Fprintf(os.Stderr, "intellect-node %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
