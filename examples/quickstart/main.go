// Command quickstart runs surely end to end with no server to install: an
// embedded NATS JetStream server (loopback only, file storage in a
// directory it creates and removes) is the durable queue, and SQLite is both
// the transactional inbox and the business database.
//
// It publishes a batch of payments that includes duplicates, payments whose
// first attempt fails transiently, poison messages, a message without a
// key and a key reused with another payload; a consumer charges them in the
// inbox transaction; then it prints what happened and a summary:
//
//	summary: published=N processed=N duplicates=N retried=N dead_lettered=N lost=0 double_effects=0
//
// lost counts operations that were neither charged nor dead-lettered;
// double_effects counts operations charged more than once. surely's promise
// is that both stay 0.
//
// With -crash, the consumer runs as a child process that is killed with
// SIGKILL at random moments several times and restarted; the totals must
// come out the same.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	var (
		crash   = flag.Bool("crash", false, "run the consumer as a child process and SIGKILL it several times")
		kills   = flag.Int("kills", 5, "with -crash: how many times to kill the consumer")
		consume = flag.Bool("consume", false, "internal: run only the consumer (the child of -crash)")
		natsURL = flag.String("nats", "", "internal: the NATS URL, for -consume")
		dbPath  = flag.String("db", "", "internal: the SQLite file, for -consume")
	)
	flag.Parse()
	var err error
	if *consume {
		err = runConsumerProcess(*natsURL, *dbPath)
	} else {
		err = run(*crash, *kills)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(crash bool, kills int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	dir, err := os.MkdirTemp("", "surely-quickstart-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	broker, err := startBroker(filepath.Join(dir, "nats"))
	if err != nil {
		return err
	}
	defer broker.Stop()

	dbPath := filepath.Join(dir, "app.db")
	app, err := openApp(ctx, dbPath)
	if err != nil {
		return err
	}
	defer app.Close()

	batch := makeBatch()
	if err := publish(ctx, broker.URL(), batch); err != nil {
		return err
	}
	fmt.Printf("published %d messages to the embedded NATS at %s\n", len(batch), broker.URL())

	if crash {
		if err := runWithKills(ctx, broker, app, dbPath, batch, kills); err != nil {
			return err
		}
	} else {
		c, err := startConsumer(ctx, broker.URL(), app)
		if err != nil {
			return err
		}
		werr := waitSettled(ctx, broker, app, batch)
		c.Close()
		if werr != nil {
			return werr
		}
	}
	return report(ctx, app, batch)
}

// runConsumerProcess is the child of -crash: a consumer that runs until it
// is killed (or interrupted).
func runConsumerProcess(natsURL, dbPath string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app, err := openApp(ctx, dbPath)
	if err != nil {
		return err
	}
	defer app.Close()
	c, err := startConsumer(ctx, natsURL, app)
	if err != nil {
		return err
	}
	<-ctx.Done()
	c.Close()
	return nil
}

// runWithKills starts the consumer as a child process, SIGKILLs it at
// random moments, restarts it, and finally lets one run until every message
// is settled.
func runWithKills(ctx context.Context, broker *broker, a *app, dbPath string, batch []order, kills int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	start := func() (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, self, "-consume", "-nats", broker.URL(), "-db", dbPath)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd, cmd.Start()
	}
	for i := 1; i <= kills; i++ {
		cmd, err := start()
		if err != nil {
			return err
		}
		// Kill it mid-stream: once it has charged something, at a random moment.
		before := a.charged(ctx)
		for deadline := time.Now().Add(10 * time.Second); a.charged(ctx) == before && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		fmt.Printf("killed consumer %d with SIGKILL (%d payments charged so far)\n", i, a.charged(ctx))
	}
	cmd, err := start()
	if err != nil {
		return err
	}
	werr := waitSettled(ctx, broker, a, batch)
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()
	return werr
}
