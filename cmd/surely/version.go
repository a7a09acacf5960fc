package main

import (
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
// github.com/surely-dev/surely/cmd/surely@v0.1.0", a pseudo-version or
// "(devel)" for a build from a checkout. A build from a checkout with VCS
// stamping (the default for go build/go install inside a git work tree,
// unless -buildvcs=false) adds the commit, its time and "(modified)" when
// the work tree had uncommitted changes. The last line is the Go toolchain.
func version(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "surely (unknown version: the binary has no build information)\n"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)" // a test binary, or a module loaded without a version
	}
	var b strings.Builder
	b.WriteString("surely " + v + "\n")
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
	if info.GoVersion != "" {
		b.WriteString(info.GoVersion + "\n")
	}
	return b.String()
}

// buildVersion is version for the running binary.
func buildVersion() string {
	return version(debug.ReadBuildInfo())
}
