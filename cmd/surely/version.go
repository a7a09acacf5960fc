package main

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// version describes the running binary from its build information, as
// "surely --version" prints it:
//
//	surely v0.1.0
//	go1.26.8
//
// The first line is the main module's version: the tag for "go install
// github.com/surely-dev/surely/cmd/surely@v0.1.0", a pseudo-version (which
// names the commit) for "go install ...@COMMIT", or "(devel)" for a build
// from a checkout. A build from a checkout with VCS stamping (the default
// for go build/go install inside a git work tree, unless -buildvcs=false)
// adds the commit, its time and "(modified)" when the work tree had
// uncommitted changes. A "(devel)" build without that stamp ("go run", a
// git worktree, -buildvcs=false, a source tree without .git) cannot say
// which commit it is: its first line says "(devel, no VCS stamp)" and a
// second line how to get one. The last line is the Go toolchain, also for a
// binary without build information (the runtime's version).
func version(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "surely (devel, no build information)\n" + runtime.Version() + "\n"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)" // a test binary, or a module loaded without a version
	}
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var b strings.Builder
	if rev == "" && v == "(devel)" {
		b.WriteString("surely (devel, no VCS stamp)\n")
		b.WriteString("built without the commit (go run, -buildvcs=false, a git worktree, or no .git): go build or go install in a git checkout records it\n")
	} else {
		b.WriteString("surely " + v + "\n")
	}
	if rev != "" {
		b.WriteString("revision " + rev)
		if at != "" {
			b.WriteString(" " + at)
		}
		if modified {
			b.WriteString(" (modified)")
		}
		b.WriteString("\n")
	}
	goVersion := info.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	b.WriteString(goVersion + "\n")
	return b.String()
}

// buildVersion is version for the running binary.
func buildVersion() string {
	return version(debug.ReadBuildInfo())
}
