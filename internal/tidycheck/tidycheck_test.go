package tidycheck

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// forbidden are modules that only surely's tests, benchmarks and commands
// need (and that no dependency's test needs): none of them may reach the
// go.sum of a module that imports only the core packages.
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

const userMain = `package main

import (
	_ "github.com/surely-dev/surely/handler"
	_ "github.com/surely-dev/surely/idempotency/redisstore"
)

func main() {}
`

// TestCoreTidyHasNoTestOnlyModules runs "go mod tidy" in a fresh module
// outside the repository that imports only handler and
// idempotency/redisstore (surely replaced by this checkout) and checks its
// go.sum for surely's test-only modules.
//
// It needs no network once the module cache holds surely's dependencies
// (GOPROXY=off works): the temporary module starts from surely's go.sum,
// which holds every checksum it can need, and tidy drops what it does not
// need. GOPROXY and the rest of the environment are passed through.
func TestCoreTidyHasNoTestOnlyModules(t *testing.T) {
	t.Parallel()
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
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(gomod)
	if goLine == nil {
		t.Fatal("surely's go.mod has no go directive")
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	user := "module example.com/tidycheck\n\n" + string(goLine) + "\n\n" +
		"require github.com/surely-dev/surely v0.0.0\n\n" +
		"replace github.com/surely-dev/surely => " + root + "\n"
	for name, content := range map[string][]byte{
		"go.mod": []byte(user), "go.sum": sums, "main.go": []byte(userMain),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// -e: a dependency's test import missing from an offline cache is
	// reported on stderr (checked below) instead of ending the run.
	cmd := exec.CommandContext(ctx, "go", "mod", "tidy", "-e")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("go mod tidy -e reported (modules missing from the cache are not checked):\n%s", stderr.String())
	}
	got, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	t.Logf("the user's go.sum has %d lines", len(lines))

	have := map[string]bool{}
	for _, l := range lines {
		have[strings.Fields(l)[0]] = true
	}
	// The check means something only if tidy did its job: what the two
	// packages build with is there.
	for _, need := range []string{"github.com/ThreeDotsLabs/watermill", "github.com/redis/go-redis/v9", "go.opentelemetry.io/otel"} {
		if !have[need] {
			t.Errorf("go.sum has no line for %s, which handler and redisstore build with:\n%s", need, got)
		}
	}
	for _, m := range forbidden {
		for p := range have {
			if p == m || strings.HasPrefix(p, m+"/") {
				t.Errorf("go.sum of a module importing only handler and redisstore lists %s (a test-only dependency of surely)", p)
			}
		}
		if strings.Contains(stderr.String(), m) {
			t.Errorf("go mod tidy looked for %s (a test-only dependency of surely):\n%s", m, stderr.String())
		}
	}
}
