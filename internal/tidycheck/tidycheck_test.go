package tidycheck

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// forbidden are modules that only surely's tests, benchmarks and commands
// need: none of them may reach the go.sum of a module that imports a
// package of surely because of surely's own tests. A package that builds
// with one of them (adapters/nats with nats.go) may list it, and a
// dependency's own test may bring one (watermill-sql's tests import the
// MySQL driver): go mod why tells these apart.
var forbidden = []string{
	"github.com/nats-io/nats-server/v2",
	"github.com/nats-io/nats.go",
	"github.com/Admiral-Piett/goaws",
	"github.com/twmb/franz-go",
	"modernc.org/sqlite",
	"modernc.org/libc",
	"github.com/Shopify/toxiproxy/v2",
	"pgregory.net/rapid",
	"github.com/rabbitmq/amqp091-go",
	"github.com/jackc/pgx/v5",
	"github.com/go-sql-driver/mysql",
	"github.com/IBM/sarama",
	"github.com/aws/aws-sdk-go-v2",
	"github.com/spf13/cobra",
	"github.com/schollz/progressbar/v3",
	"github.com/prometheus/client_golang",
	"go.opentelemetry.io/otel/exporters/prometheus",
	"google.golang.org/protobuf",
}

// TestTidyHasNoTestOnlyModules runs "go mod tidy" in a fresh module outside
// the repository (surely replaced by this checkout) that imports the core
// packages (handler and idempotency/redisstore), or one broker adapter, and
// checks its go.sum for surely's test-only modules.
//
// Each adapter's own tests import only what the adapter builds with and
// light helpers; the conformance suite (adapters/adaptertest links the
// SQLite driver) and the tests on an embedded or emulated broker
// (internal/testbroker links nats-server, internal/sqsemu goaws, kfake is
// franz-go) are in adapters/<broker>/integration, which nothing imports.
func TestTidyHasNoTestOnlyModules(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		imports []string
		builds  []string // modules the user's program builds with: go.sum must list them
	}{
		{"core", []string{"handler", "idempotency/redisstore"},
			[]string{"github.com/ThreeDotsLabs/watermill", "github.com/redis/go-redis/v9", "go.opentelemetry.io/otel"}},
		{"amqp", []string{"adapters/amqp"}, []string{"github.com/rabbitmq/amqp091-go"}},
		{"nats", []string{"adapters/nats"}, []string{"github.com/nats-io/nats.go"}},
		{"redisstream", []string{"adapters/redisstream"}, []string{"github.com/redis/go-redis/v9"}},
		{"kafka", []string{"adapters/kafka"}, []string{"github.com/IBM/sarama"}},
		{"sqs", []string{"adapters/sqs"}, []string{"github.com/aws/aws-sdk-go-v2"}},
		{"sql", []string{"adapters/sql"}, []string{"github.com/ThreeDotsLabs/watermill-sql/v4"}},
		{"gochannel", []string{"adapters/gochannel"}, []string{"github.com/ThreeDotsLabs/watermill"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkTidy(t, c.imports, c.builds)
		})
	}
}

// checkTidy tidies a module whose main package imports surely's packages
// imports and fails for every forbidden module in its go.sum that a test
// of one of surely's packages brought there.
func checkTidy(t *testing.T, imports, builds []string) {
	root := moduleRoot(t)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(gomod)
	if goLine == nil {
		t.Fatal("surely's go.mod has no go directive")
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	var main strings.Builder
	main.WriteString("package main\n\nimport (\n")
	for _, p := range imports {
		main.WriteString("\t_ \"github.com/surely-dev/surely/" + p + "\"\n")
	}
	main.WriteString(")\n\nfunc main() {}\n")

	dir := t.TempDir()
	user := "module example.com/tidycheck\n\n" + string(goLine) + "\n\n" +
		"require github.com/surely-dev/surely v0.0.0\n\n" +
		"replace github.com/surely-dev/surely => " + root + "\n"
	for name, content := range map[string][]byte{
		"go.mod": []byte(user), "go.sum": sums, "main.go": []byte(main.String()),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// -e: a dependency's test import missing from an offline cache is
	// reported on stderr (checked below) instead of ending the run.
	stderr := goCmd(t, dir, "mod", "tidy", "-e")
	if stderr != "" {
		t.Logf("go mod tidy -e reported (modules missing from the cache are not checked):\n%s", stderr)
	}
	got, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	t.Logf("importing %s: the user's go.sum has %d lines", strings.Join(imports, ", "), len(lines))

	have := map[string]bool{}
	for _, l := range lines {
		have[strings.Fields(l)[0]] = true
	}
	// The check means something only if tidy did its job: what the
	// packages build with is there.
	for _, need := range builds {
		if !have[need] {
			t.Errorf("go.sum has no line for %s, which %s builds with:\n%s", need, strings.Join(imports, ", "), got)
		}
	}
	var found []string
	for _, m := range forbidden {
		for p := range have {
			if p == m || strings.HasPrefix(p, m+"/") {
				found = append(found, p)
			}
		}
		if strings.Contains(stderr, m) {
			t.Errorf("go mod tidy looked for %s (a test-only dependency of surely):\n%s", m, stderr)
		}
	}
	if len(found) == 0 {
		return
	}
	sort.Strings(found)
	// go mod why -m prints, for each module, the shortest import chain
	// from the user's module to a package of it; "(main module does not
	// need ...)" when none. A chain through a surely test ("<surely
	// package>.test") is what this check is about.
	why := goCmdOut(t, dir, append([]string{"mod", "why", "-m"}, found...)...)
	for _, block := range strings.Split(why, "# ")[1:] {
		mod, chain, _ := strings.Cut(block, "\n")
		chain = strings.TrimSpace(chain)
		if viaSurelyTest(chain) || strings.HasPrefix(chain, "(main module does not need") {
			t.Errorf("go.sum of a module importing %s lists %s (a test-only dependency of surely):\n%s",
				strings.Join(imports, ", "), mod, chain)
			continue
		}
		t.Logf("go.sum lists %s, not through a test of surely:\n%s", mod, chain)
	}
}

// viaSurelyTest says whether an import chain of go mod why goes through
// the test of one of surely's packages.
func viaSurelyTest(chain string) bool {
	for _, l := range strings.Split(chain, "\n") {
		if strings.HasPrefix(l, "github.com/surely-dev/surely/") && strings.HasSuffix(l, ".test") {
			return true
		}
	}
	return false
}

// moduleRoot returns the checkout's root, checked to be surely's module.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(gomod, []byte("module github.com/surely-dev/surely\n")) {
		t.Fatalf("%s is not surely's module root", root)
	}
	return root
}

// goCmd runs the go command in dir and returns its standard error; it
// fails the test if the command fails. GOPROXY and the rest of the
// environment are passed through.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	_, stderr := runGo(t, dir, args...)
	return stderr
}

// goCmdOut is goCmd returning the standard output.
func goCmdOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	stdout, _ := runGo(t, dir, args...)
	return stdout
}

func runGo(t *testing.T, dir string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String()
}
