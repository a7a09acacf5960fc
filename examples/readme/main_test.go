package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The lines of the README right before the program's code block and
// before its output's.
const (
	programMarker = "<!-- examples/readme/main.go -->\n"
	outputMarker  = "<!-- examples/readme output -->\n"
)

// wantOutput is what the program prints.
const wantOutput = `charged order-1: 10 EUR
order-1 processed
order-1 duplicate
order-2 dead_lettered permanent: card declined
`

// block returns the fenced code block that follows marker in the README.
func block(t *testing.T, readme []byte, marker, fence string) []byte {
	t.Helper()
	_, after, ok := bytes.Cut(readme, []byte(marker))
	if !ok {
		t.Fatalf("README.md has no line %q", strings.TrimSpace(marker))
	}
	body, ok := bytes.CutPrefix(after, []byte(fence+"\n"))
	if !ok {
		t.Fatalf("README.md: the line after %q is not %q", strings.TrimSpace(marker), fence)
	}
	body, _, ok = bytes.Cut(body, []byte("\n```\n"))
	if !ok {
		t.Fatalf("README.md: the block after %q does not end", strings.TrimSpace(marker))
	}
	return append(body, '\n')
}

// TestREADMEShowsThisProgram: the README's "Use it" block is this file,
// byte for byte, and the output it shows is the program's.
func TestREADMEShowsThisProgram(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if got := block(t, readme, programMarker, "```go"); !bytes.Equal(got, src) {
		t.Errorf("README.md's program differs from examples/readme/main.go: copy the file into the block\n--- README.md\n%s", got)
	}
	if got := block(t, readme, outputMarker, "```"); string(got) != wantOutput {
		t.Errorf("README.md shows the output\n%s\nthe program prints\n%s", got, wantOutput)
	}
}

// TestProgramRuns builds the program and runs it as a user would.
func TestProgramRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program (-short)")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "readme")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the program failed: %v\n%s", err, stderr.String())
	}
	if stdout.String() != wantOutput {
		t.Errorf("the program printed\n%s\nwant\n%s", stdout.String(), wantOutput)
	}
	if stderr.Len() > 0 {
		t.Errorf("the program wrote to stderr:\n%s", stderr.String())
	}
}
