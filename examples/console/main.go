// Command console runs a consumer through an outage, so that its dead
// letters are real, and serves the operator console over them.
//
// A billing consumer (handler.New, SQLite dedup store, GoChannel) charges
// 24 orders while the payment gateway is down for some (a transient error
// that outlasts the attempt budget: "exhausted"), a fraud check times out
// for others (exhausted, another error type) and one card is declined
// ("permanent"). The dead letters land in a SQLite archive
// (dlq/sqlarchive). Then the gateway comes back and the console serves the
// archive on a loopback port; a replay from the page republishes to the
// consumer's topic, where the orders are now charged:
//
//	go run ./examples/console                    # until Ctrl-C
//	go run ./examples/console -exit-after 30s    # for a script
//
// It prints the console's URL.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/retry"
)

const (
	topic     = "orders"
	namespace = "charge-payments"
	orders    = 24
)

// gatewayError is the payment gateway's outage.
type gatewayError struct{ addr string }

func (e *gatewayError) Error() string { return "dial tcp " + e.addr + ": connect: connection refused" }

// fraudTimeout is the fraud check's timeout.
type fraudTimeout struct{}

func (fraudTimeout) Error() string { return "fraud check: context deadline exceeded after 2s" }

func main() {
	var (
		dbPath    = flag.String("db", "", "SQLite file of the store and the archive (default: a new temporary file)")
		listen    = flag.String("listen", "127.0.0.1:8080", "loopback address of the console")
		exitAfter = flag.Duration("exit-after", 0, "stop this long after the console is up (0: on Ctrl-C or SIGTERM)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *dbPath == "" {
		dir, err := os.MkdirTemp("", "surely-console-")
		if err != nil {
			_, _ = fmt.Fprintln(os.Stderr, "console:", err)
			os.Exit(1)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		*dbPath = filepath.Join(dir, "billing.db")
	}
	if err := run(ctx, *dbPath, *listen, *exitAfter, os.Stdout); err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

// run fills the archive through an outage, then serves the console on
// listen until ctx ends, or exitAfter (when positive) after it is up: the
// outage takes its own time, longer on a loaded machine.
func run(ctx context.Context, path, listen string, exitAfter time.Duration, out io.Writer) error {
	if host, _, err := net.SplitHostPort(listen); err != nil || host != "localhost" && !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("-listen %q: the example serves without authentication, on loopback only", listen)
	}
	db, store, arch, err := open(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer func() { _ = pubSub.Close() }()
	var gatewayUp atomic.Bool
	router, err := consume(ctx, store, arch, pubSub, &gatewayUp, out)
	if err != nil {
		return err
	}
	defer func() { _ = router.Close() }()
	if err := outage(ctx, arch, pubSub, out); err != nil {
		return err
	}
	gatewayUp.Store(true)
	_, _ = fmt.Fprintln(out, "the gateway is back: replay the dead letters from the console")

	h, err := console.New(arch,
		console.WithoutAuth(),      // loopback only, checked above
		console.WithAllowedHosts(), // and only a loopback Host: no DNS rebinding
		console.WithPublisher(pubSub),
		replay.WithStore(store), // the operation page; replays settle done operations
		dlq.WithRedactor(func(s string) string { return strings.ReplaceAll(s, "10.20.0.7", "[gateway]") }))
	if err != nil {
		return err
	}
	if exitAfter > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, exitAfter)
		defer cancel()
	}
	return serve(ctx, listen, h, out)
}

// open returns the store and the archive in the SQLite file, migrated.
func open(ctx context.Context, path string) (*sql.DB, *sqlstore.Store, *sqlarchive.Archive, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, nil, nil, err
	}
	store, errStore := sqlstore.New(db, sqlstore.SQLite)
	arch, errArch := sqlarchive.New(db, sqlstore.SQLite)
	err = errors.Join(errStore, errArch)
	if err == nil {
		err = errors.Join(store.Migrate(ctx), arch.Migrate(ctx))
	}
	if err != nil {
		return nil, nil, nil, errors.Join(err, db.Close())
	}
	return db, store, arch, nil
}

// charge is the business handler: while the gateway is down, every third
// order fails on it and every fifth on the fraud check; order 1011's card
// is always declined.
func charge(gatewayUp *atomic.Bool, out io.Writer) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		key := idempotency.KeyFrom(msg.Context())
		var n int
		_, _ = fmt.Sscanf(key, "order-%d", &n)
		switch {
		case n == 1011:
			return nil, retry.Permanent(fmt.Errorf("charge %s: card declined (do_not_honor)", key))
		case !gatewayUp.Load() && n%3 == 0:
			return nil, fmt.Errorf("charge %s: %w", key, &gatewayError{"10.20.0.7:443"})
		case !gatewayUp.Load() && n%5 == 0:
			return nil, fmt.Errorf("charge %s: %w", key, fraudTimeout{})
		}
		_, _ = fmt.Fprintf(out, "charged %s\n", key)
		return nil, nil
	}
}

// consume starts the billing consumer on the topic.
func consume(ctx context.Context, store idempotency.Store, arch archive.Archive, pubSub *gochannel.GoChannel, gatewayUp *atomic.Bool, out io.Writer) (*message.Router, error) {
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(3),
		retry.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	h, err := handler.New(charge(gatewayUp, out),
		handler.WithStore(store, namespace),
		handler.WithDeadLetter(arch, "dead-letters"),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithConsumerGroup("billing"))
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddConsumerHandler(namespace, topic, pubSub, handler.NoPublish(h))
	go func() { _ = router.Run(ctx) }()
	select {
	case <-router.Running():
		return router, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// outage publishes the orders and waits until every one was charged or
// dead-lettered.
func outage(ctx context.Context, arch archive.Archive, pubSub *gochannel.GoChannel, out io.Writer) error {
	for i := range orders {
		n := 1001 + i
		msg := message.NewMessage(fmt.Sprintf("0190b5d2-7c4e-7a10-8000-%012d", n),
			[]byte(fmt.Sprintf(`{"order":%d,"amount":"%d.90 EUR","card":"visa-4242"}`, n, 10+i)))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, fmt.Sprintf("order-%d", n))
		msg.Metadata.Set("content-type", "application/json")
		if err := pubSub.Publish(topic, msg); err != nil {
			return err
		}
	}
	want := 0
	for i := range orders {
		if n := 1001 + i; n == 1011 || n%3 == 0 || n%5 == 0 {
			want++
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := arch.Stats(ctx, archive.Filter{})
		if err != nil {
			return err
		}
		if st.Total >= want {
			_, _ = fmt.Fprintf(out, "dead-lettered %d orders\n", st.Total)
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for the consumer")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// serve serves h on listen until ctx ends, printing the URL; then it
// stops the server, and the console's replay runs (saved interrupted, to
// be resumed).
func serve(ctx context.Context, listen string, h *console.Console, out io.Writer) error {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	_, _ = fmt.Fprintf(out, "console: http://%s/\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-done:
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// The server first: after it no request starts a run.
	return errors.Join(serveErr, srv.Shutdown(shut), h.Close(shut))
}
