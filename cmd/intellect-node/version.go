package main

import (
	"fmt"
	"runtime/debug"
)

func init() {
	register("version", "print the module version and the VCS commit this binary was built from", runVersion)
}

// runVersion prints versionLine of this binary's build information.
func runVersion(args []string) error {
	fs := newFlagSet("version", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Println(versionLine(bi))
	return nil
}

// versionLine says, in one line, what the build information records: the
// main module's version ("(devel)" when the go command gave none), the VCS
// commit ("unknown" when the build was not stamped, e.g. outside a git
// checkout or with -buildvcs=false), whether the tree had uncommitted
// changes, the commit's time and the Go version, e.g.
//
//	intellect-node v0.0.0-20261127100000-0123456789ab commit 0123456789abcdef… (modified) 2026-11-27T10:00:00Z go1.26.0
func versionLine(bi *debug.BuildInfo) string {
	if bi == nil {
		return "intellect-node (devel) commit unknown (no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	line := "intellect-node " + version + " commit "
	if rev := vcs["vcs.revision"]; rev != "" {
		line += rev
	} else {
		line += "unknown"
	}
	if vcs["vcs.modified"] == "true" {
		line += " (modified)"
	}
	if t := vcs["vcs.time"]; t != "" {
		line += " " + t
	}
	return line + " " + bi.GoVersion
}
