package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// versionCommand prints the module version and VCS revision the binary was
// built from (runtime/debug.ReadBuildInfo).
type versionCommand struct {
	app *app
}

// versionJSON is version --json (docs/CLI.md).
type versionJSON struct {
	Version   string `json:"version"`            // module version: v1.2.3, or (devel) for a build from a checkout
	Revision  string `json:"revision,omitempty"` // VCS commit, when built in a repository
	Time      string `json:"time,omitempty"`     // its commit time
	Modified  bool   `json:"modified"`           // the work tree had uncommitted changes
	GoVersion string `json:"goVersion"`          // the Go release that built it
	Module    string `json:"module,omitempty"`   // the main module's path
	Platform  string `json:"platform"`           // GOOS/GOARCH
}

func (c *versionCommand) flags() (*flag.FlagSet, *bool) {
	fs := newFlagSet("version")
	return fs, jsonFlag(fs)
}

func (c *versionCommand) Run(ctx context.Context, args []string) error {
	fs, asJSON := c.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	v := buildVersion()
	if *asJSON {
		return c.app.printJSON(v)
	}
	fmt.Fprintln(c.app.stdout, versionLine(v))
	if v.Revision == "" {
		fmt.Fprintln(c.app.stderr, noRevisionNote)
	}
	return nil
}

// noRevisionNote is version's note on stderr when Go embedded no VCS
// revision: go run, go test, -buildvcs=false builds and builds in a git
// worktree (which Go does not stamp) carry none.
const noRevisionNote = "note: no VCS revision embedded (go run, -buildvcs=false and git worktrees give none); " +
	"go install ./cmd/localcloud in a git clone embeds it"

// versionLine is version's text output:
// "localcloud (devel) (0123456789ab, 2026-01-02T03:04:05Z, modified) go1.26.0 linux/amd64".
func versionLine(v versionJSON) string {
	line := "localcloud " + v.Version
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		line += " (" + rev
		if v.Time != "" {
			line += ", " + v.Time
		}
		if v.Modified {
			line += ", modified"
		}
		line += ")"
	}
	return fmt.Sprintf("%s %s %s", line, v.GoVersion, v.Platform)
}

// buildVersion reads the binary's build info.
func buildVersion() versionJSON {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return versionFrom(bi)
}

// versionFrom describes a build info (nil: none available).
func versionFrom(bi *debug.BuildInfo) versionJSON {
	v := versionJSON{Version: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	v.Module = bi.Main.Path
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (c *versionCommand) Usage() {
	fs, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Print localcloud's version and build.

Usage:
  localcloud version [--json]
  localcloud --version

Prints the module version (v1.2.3 for go install ...@v1.2.3, "(devel)" for a
build from a checkout), the VCS revision and its time when built in a git
repository (with "modified" for uncommitted changes), the Go release and
the platform. A binary without a revision (go run, -buildvcs=false) says so
on stderr and how to build one that has it: go install ./cmd/localcloud in
a git clone (Go stamps no revision in a git worktree).

Examples:
  localcloud --version
  localcloud version --json

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
