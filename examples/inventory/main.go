// Command inventory is the ReserveInventory example of surely, run against
// real servers. It needs both of them, and exits with status 1 and a
// one-line reason when either does not answer:
//
//	SURELY_POSTGRES_URL  PostgreSQL; default postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	SURELY_NATS_URL      NATS with JetStream; default nats://127.0.0.1:4222
//
// PostgreSQL holds the stock, the reservations, the dead letters received
// and surely's transactional inbox (idempotency/sqlstore, Postgres dialect).
// Reservations arrive over NATS JetStream through adapters/nats; the
// operation key is the reservation id, read from the JSON payload.
//
// It publishes 200 reservations of 20 SKUs: 180 distinct ones, 20 of them
// published a second time (same reservation id and payload under a new
// message UUID, as a producer retrying its publish does) and 10 of them
// for an unknown SKU, a permanent error that must end in the dead letter.
// In one inbox transaction the consumer locks the SKU's stock row,
// decrements it by the quantity and inserts a reservation row (the
// reservations table has no unique constraint, so a double effect would
// show), and surely marks the operation DONE.
//
// # Kills
//
// The consumer runs as a child process, this program re-executed with
// -consume, and is killed with SIGKILL 7 times (-kills), then restarted.
// Some kills land at random moments, once the child has committed a
// reservation; the others at one chosen crash point each, armed through
// the child's environment (SURELY_INVENTORY_CRASH_AT): the first delivery
// that gets there prints a marker line and blocks (so does every other
// delivery that gets there after it), and the parent kills the child as
// soon as it reads the line:
//
//   - before-effect: in the inbox transaction, the operation claimed, the
//     stock not read yet;
//   - in-tx: after the UPDATE of the stock and the INSERT of the
//     reservation, before COMMIT;
//   - after-commit: in a router middleware outside handler.New's chain,
//     after the chain returned nil for a delivery whose transaction
//     committed, before the router acks.
//
// After each targeted kill the parent checks the database (no reservation
// row before COMMIT, exactly one after it). A last child runs until every
// message is settled; then the parent checks the database and prints
//
//	summary: reservations=N unique=U stock_decrements=U lost=0 double_effects=0 kills=K
//
// N counts the published messages, U the distinct reservations of a known
// SKU, stock_decrements the reservation effects committed, lost the
// reservations neither committed nor dead-lettered, double_effects those
// committed more than once. It exits non-zero unless lost and
// double_effects are 0, K is at least 5, the stock of every SKU went down by
// exactly the quantities of its distinct reservations, and exactly the
// unknown-SKU reservations were dead-lettered.
//
// # Shared servers
//
// Every run names its stream, subjects, consumers and tables with a random
// suffix, and deletes the stream (with its consumers) and drops the tables
// when it ends, on failure and on Ctrl-C too; it touches nothing else, so
// that it can run on servers that tests are using at the same time. A run
// takes about 10 seconds and is bounded by a 90-second deadline.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Environment variables, with the defaults used when they are unset.
const (
	postgresEnv     = "SURELY_POSTGRES_URL"
	natsEnv         = "SURELY_NATS_URL"
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultNATS     = "nats://127.0.0.1:4222"
)

// minKills is the fewest kills a run accepts.
const minKills = 5

// runTimeout bounds a whole run; every wait inside has a shorter deadline of
// its own.
const runTimeout = 90 * time.Second

func main() {
	var (
		kills   = flag.Int("kills", 7, fmt.Sprintf("how many times to SIGKILL the consumer (at least %d)", minKills))
		consume = flag.Bool("consume", false, "internal: run only the consumer (the child process)")
		suffix  = flag.String("suffix", "", "internal: the run's name suffix, for -consume")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *consume {
		err = runConsumer(ctx, newNames(*suffix), envOr(postgresEnv, defaultPostgres), envOr(natsEnv, defaultNATS), os.Getenv(crashAtEnv))
	} else {
		err = run(ctx, config{
			postgresURL: envOr(postgresEnv, defaultPostgres),
			natsURL:     envOr(natsEnv, defaultNATS),
			kills:       *kills,
			out:         os.Stdout,
		})
	}
	if err != nil {
		// One line, whatever the error says.
		fmt.Fprintln(os.Stderr, "inventory:", strings.Join(strings.Fields(err.Error()), " "))
		stop()
		os.Exit(1)
	}
}

// say prints one line of the run's report (a failed write to the report
// is nothing to act on).
func say(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format+"\n", args...)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// config is one run of the parent.
type config struct {
	postgresURL, natsURL string
	kills                int
	// child is the consumer executable, run with -consume (default: this
	// program, os.Executable).
	child string
	out   io.Writer
}

// run publishes the workload, consumes it through killed and restarted
// child processes, checks the database and prints the summary.
func run(ctx context.Context, cfg config) (err error) {
	if cfg.kills < minKills {
		return fmt.Errorf("-kills %d: at least %d", cfg.kills, minKills)
	}
	if cfg.child == "" {
		if cfg.child, err = os.Executable(); err != nil {
			return err
		}
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()

	n := newNames(randomSuffix())
	db, err := openPostgres(ctx, cfg.postgresURL)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	b, err := connectNATS(cfg.natsURL)
	if err != nil {
		return err
	}
	defer b.Close()

	// Whatever happens from here on (the children are dead by then), leave
	// nothing behind.
	cleaned := false
	cleanup := func() error {
		cleaned = true
		if err := errors.Join(b.deleteStream(n), dropTables(db, n)); err != nil {
			return err
		}
		say(cfg.out, "cleaned up: deleted stream %s and its consumers, dropped tables %s_*", n.stream, n.prefix)
		return nil
	}
	defer func() {
		if !cleaned {
			err = errors.Join(err, cleanup())
		}
	}()
	if err := createTables(ctx, db, n); err != nil {
		return err
	}
	if err := b.ensureStream(ctx, n); err != nil {
		return err
	}

	batch := makeBatch(n.suffix)
	if err := publish(ctx, cfg.natsURL, n.topic, batch.messages); err != nil {
		return err
	}
	say(cfg.out, "published %d reservations to %s (stream %s): %d distinct, %d published twice, %d for an unknown SKU",
		len(batch.messages), n.topic, n.stream, len(batch.unique), batch.resent, len(batch.unknown))

	kills, err := consumeWithKills(ctx, cfg, n, db, b, batch)
	if err != nil {
		return err
	}
	summary, err := report(ctx, cfg.out, db, n, batch, kills)
	err = errors.Join(err, cleanup())
	say(cfg.out, "took %v", time.Since(started).Round(100*time.Millisecond))
	// The summary is the last line, also when the checks failed.
	if summary != "" {
		say(cfg.out, "%s", summary)
	}
	return err
}

// names are one run's stream, subjects, consumers and tables, all with the
// run's random suffix.
type names struct {
	suffix, prefix                          string
	stream, topic, deadTopic                string
	consumer, deadConsumer                  string
	stock, reservations, deadLetters, inbox string
}

func newNames(suffix string) names {
	p := "inventory_" + suffix
	return names{
		suffix:       suffix,
		prefix:       p,
		stream:       "INVENTORY_" + strings.ToUpper(suffix),
		topic:        "inventory." + suffix + ".reserve",
		deadTopic:    "inventory." + suffix + ".dead",
		consumer:     "inventory-" + suffix,
		deadConsumer: "inventory-" + suffix + "-dead",
		stock:        p + "_stock",
		reservations: p + "_reservations",
		deadLetters:  p + "_dead_letters",
		inbox:        p + "_inbox",
	}
}

func randomSuffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
