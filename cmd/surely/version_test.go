package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionFromBuildInfo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{
			name: "go install of a tag",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/surely-dev/surely", Version: "v0.1.0"}},
			ok:   true,
			want: "surely v0.1.0\ngo1.26.8\n",
		},
		{
			name: "checkout with uncommitted changes",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/surely-dev/surely", Version: "(devel)"},
				Settings: []debug.BuildSetting{
					{Key: "-buildmode", Value: "exe"},
					{Key: "vcs", Value: "git"},
					{Key: "vcs.revision", Value: "c7c3e76b0e5c2d0e4a1b2c3d4e5f60718293a4b5"},
					{Key: "vcs.time", Value: "2026-12-01T17:20:00Z"},
					{Key: "vcs.modified", Value: "true"},
				}},
			ok:   true,
			want: "surely (devel)\nrevision c7c3e76b0e5c2d0e4a1b2c3d4e5f60718293a4b5 2026-12-01T17:20:00Z (modified)\ngo1.26.8\n",
		},
		{
			name: "clean checkout",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20261201172000-c7c3e76b0e5c"},
				Settings: []debug.BuildSetting{
					{Key: "vcs.revision", Value: "c7c3e76b0e5c2d0e4a1b2c3d4e5f60718293a4b5"},
					{Key: "vcs.modified", Value: "false"},
				}},
			ok:   true,
			want: "surely v0.1.1-0.20261201172000-c7c3e76b0e5c\nrevision c7c3e76b0e5c2d0e4a1b2c3d4e5f60718293a4b5\ngo1.26.8\n",
		},
		{
			name: "go run of a checkout: no VCS stamp",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/surely-dev/surely", Version: "(devel)"},
				Settings: []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "-compiler", Value: "gc"}}},
			ok:   true,
			want: "surely (devel, no VCS stamp)\n" + noStampHint + "go1.26.8\n",
		},
		{
			name: "no version recorded",
			info: &debug.BuildInfo{GoVersion: "go1.26.8"},
			ok:   true,
			want: "surely (devel, no VCS stamp)\n" + noStampHint + "go1.26.8\n",
		},
		{
			name: "go install of a commit (module zip: a pseudo-version, no VCS stamp)",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/surely-dev/surely", Version: "v0.0.0-20261201172000-c7c3e76b0e5c"}},
			ok:   true,
			want: "surely v0.0.0-20261201172000-c7c3e76b0e5c\ngo1.26.8\n",
		},
		{
			name: "no build information",
			want: "surely (devel, no build information)\n" + runtime.Version() + "\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, version(tc.info, tc.ok))
		})
	}
}

// noStampHint is the line a "(devel)" build without VCS stamp prints
// after its first.
const noStampHint = "built without the commit (go run, -buildvcs=false, a git worktree, or no .git): " +
	"go build or go install in a git checkout records it\n"

// TestVersionWithoutVCSStamp builds the command as "go run" does, without
// VCS stamping, and runs "surely --version": it says it is a development
// build without a stamp, and names the Go toolchain.
func TestVersionWithoutVCSStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command (-short)")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "surely")
	build := exec.CommandContext(t.Context(), "go", "build", "-buildvcs=false", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	out, err = exec.CommandContext(t.Context(), bin, "--version").Output()
	require.NoError(t, err)
	require.Equal(t, "surely (devel, no VCS stamp)\n"+noStampHint+runtime.Version()+"\n", string(out))
}

// TestVersionFlag: --version prints the running binary's build information
// and exits 0, and -v is its shorthand.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	a, _, _ := testApp(t)
	for _, flag := range []string{"--version", "-v"} {
		out, stderr, code := run(t, a, flag)
		require.Equal(t, 0, code, stderr)
		require.Equal(t, buildVersion(), out)
		require.True(t, strings.HasPrefix(out, "surely "), out)
	}
}

// TestVersionOfCheckoutBuild builds the command from this checkout with VCS
// stamping, as "go install ./cmd/surely" does, and runs "surely --version":
// it names the commit checked out, and "(modified)" exactly when git sees
// uncommitted changes.
func TestVersionOfCheckoutBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command (-short)")
	}
	t.Parallel()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not found on PATH")
	}
	// go build stamps a repository whose .git is a directory: a git
	// worktree (.git is a file) gets no vcs.* settings at all.
	if fi, err := os.Stat(filepath.Join("..", "..", ".git")); err != nil || !fi.IsDir() {
		t.Skip("the module root has no .git directory (not a checkout, or a git worktree, which go build does not stamp)")
	}
	head, err := exec.CommandContext(t.Context(), gitPath, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	status, err := exec.CommandContext(t.Context(), gitPath, "status", "--porcelain").Output()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "surely")
	build := exec.CommandContext(t.Context(), "go", "build", "-buildvcs=true", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	out, err = exec.CommandContext(t.Context(), bin, "--version").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, lines, 3, "%s", out)
	require.True(t, strings.HasPrefix(lines[0], "surely v") || lines[0] == "surely (devel)", lines[0])
	require.True(t, strings.HasPrefix(lines[1], "revision "+strings.TrimSpace(string(head))+" "), lines[1])
	require.Equal(t, len(status) > 0, strings.HasSuffix(lines[1], " (modified)"), "git status --porcelain:\n%s\n%s", status, lines[1])
	require.True(t, strings.HasPrefix(lines[2], "go1."), lines[2])
}
