package sqlstore_test

// Crash tests kill a real child process (this test binary, re-executed with
// crashChildEnv set, see TestMain) with SIGKILL at a marker the child prints
// to stdout just before it blocks.
//
// The "broker" is the parent: it delivers the same operation (key and
// payload, through the child's environment) to the first child, kills it at
// the crash point, then redelivers it to a restarted child, which delivers
// it until the chain acks (as a broker redelivers after a nack) and prints
// the outcome.
//
// The crash tests run on both paths of the inbox (crashPaths): with
// WithInTxClaims, and the default one (the dedup step's claim committed
// first, then the effect's transaction); those of a counting broker's
// first delivery (the one transaction) on the first only. The child checks
// that the path it was asked for is the one that ran.

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/internal/opctx"
	"github.com/surely-dev/surely/internal/testsql"
	"github.com/surely-dev/surely/retry"
)

// The child's environment.
const (
	crashChildEnv   = "SURELY_SQLSTORE_CRASH_CHILD" // "1" makes TestMain run crashChild
	crashDialectEnv = "SURELY_CRASH_DIALECT"        // sqlite | postgres | mysql
	crashDSNEnv     = "SURELY_CRASH_DSN"            // the SQLite DSN (PostgreSQL: SURELY_POSTGRES_URL)
	crashTableEnv   = "SURELY_CRASH_TABLE"          // the store's table; effects go to table+"_fx"
	crashKeyEnv     = "SURELY_CRASH_KEY"            // the delivered operation: key ...
	crashPayloadEnv = "SURELY_CRASH_PAYLOAD"        // ... and payload
	crashAtEnv      = "SURELY_CRASH_AT"             // crashInTx | crashAfterCommit | "" (run to the ack)
	// crashCountEnv is the broker's delivery count of the first delivery
	// ("" or 0: a broker that counts none); each redelivery in the child
	// adds one. The child first processes a message of its own, so that
	// the inbox has accepted to claim in its transaction.
	crashCountEnv = "SURELY_CRASH_COUNT"
	// crashPathEnv is the inbox's path: crashPathDefault for the Inbox
	// of a store without WithInTxClaims, anything else with it.
	crashPathEnv = "SURELY_CRASH_PATH"
)

// crashPath is a path of the inbox that a crash test covers.
type crashPath struct {
	name string
	// inTx: the store claims in the inbox's transaction (WithInTxClaims);
	// else the dedup step commits the claim before the effect's
	// transaction.
	inTx bool
}

const crashPathDefault = "default"

var (
	pathInTx    = crashPath{"intx", true}
	pathDefault = crashPath{crashPathDefault, false}
	crashPaths  = []crashPath{pathInTx, pathDefault}
)

// Crash points, and what the child prints on stdout when it reaches one.
const (
	crashInTx        = "in-tx"        // inside the inbox transaction, after the effect, before COMMIT
	crashAfterCommit = "after-commit" // after COMMIT, before the router would ack
	crashMarker      = "SURELY-CRASH-POINT "
	crashResult      = "SURELY-CRASH-RESULT "
	crashLease       = time.Second // the lease a crash leaves behind
	crashNamespace   = "crash"
)

// crashChild is the consumer process: one handler.New chain around the
// inbox, delivering the operation of its environment until acked. It
// returns the process's exit code.
func crashChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	var (
		db      *sql.DB
		dialect sqlstore.Dialect
		err     error
	)
	switch os.Getenv(crashDialectEnv) {
	case "sqlite":
		dialect = sqlstore.SQLite
		db, err = sql.Open("sqlite", os.Getenv(crashDSNEnv))
	case "postgres":
		dialect = sqlstore.Postgres
		db, err = testsql.OpenPostgres(os.Getenv("SURELY_POSTGRES_URL"))
	case "mysql":
		dialect = sqlstore.MySQL
		db, err = testsql.OpenMySQL(os.Getenv("SURELY_MYSQL_URL"))
	default:
		err = fmt.Errorf("unknown dialect %q", os.Getenv(crashDialectEnv))
	}
	if err != nil {
		return fail(err)
	}
	defer func() { _ = db.Close() }()
	table, at := os.Getenv(crashTableEnv), os.Getenv(crashAtEnv)
	inTx := os.Getenv(crashPathEnv) != crashPathDefault
	opts := []idempotency.Option{sqlstore.WithTable(table)}
	if inTx {
		opts = append(opts, sqlstore.WithInTxClaims())
	}
	s, err := sqlstore.New(db, dialect, opts...)
	if err != nil {
		return fail(err)
	}
	block := func(point string) {
		fmt.Println(crashMarker + point) // stdout is unbuffered: the parent reads it at once
		time.Sleep(time.Minute)          // the parent kills us here
		os.Exit(3)
	}
	effect := rebind(dialect, "INSERT INTO "+quote(dialect, table+"_fx")+" (op_key, payload, attempt) VALUES (?, ?, ?)")
	key := os.Getenv(crashKeyEnv)
	pay := func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		op, _ := opctx.From(ctx)
		if op.Key == key && (op.Deferred != nil) != inTx {
			// The dedup step left the claim to the inbox (op.Deferred)
			// exactly when the store claims in its transaction: the
			// warm-up below made the inbox accept.
			fmt.Fprintf(os.Stderr, "crash child: the inbox took the wrong path (claim in its transaction: %v, asked for %v)\n",
				op.Deferred != nil, inTx)
			os.Exit(4)
		}
		if _, err := tx.ExecContext(ctx, effect, op.Key, string(msg.Payload), op.Attempt); err != nil {
			return nil, err
		}
		if at == crashInTx && op.Key == key {
			block(crashInTx)
		}
		return nil, nil
	}
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 50*time.Millisecond), retry.WithMaxInProcessTime(crashLease/2))
	if err != nil {
		return fail(err)
	}
	var outcome handler.Outcome
	h, err := handler.New(s.Inbox(pay),
		handler.WithStore(s, crashNamespace),
		handler.WithDeadLetter(faults.NewPublisher(0), deadTopic),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(crashLease),
		// The longest store timeout the lease allows (the default is a
		// third of it): a claim that times out on a loaded machine after
		// it committed would count an attempt that no crash took.
		handler.WithStoreTimeout(crashLease*9/10),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			outcome = p.Outcome
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		return fail(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	// ack delivers an operation until the chain acks it, as a broker
	// redelivers after a nack: a fresh delivery each time, with a count
	// that starts at first and grows by one (first 0: no count).
	ack := func(key, payload string, first int) error {
		for n := first; ; n++ {
			msg := delivery(key, payload)
			if first > 0 {
				msg = counted(msg, n)
			}
			_, err := h(msg)
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not acked after 20s: %w", key, err)
			}
			time.Sleep(20 * time.Millisecond) // a broker's redelivery delay
		}
	}
	// A first message, so that the crash hits a chain whose inbox has
	// accepted to claim in its transaction, as in a process that ran for
	// a while. Its key is this process's own: one that an earlier child
	// processed would be a duplicate, which never reaches the inbox.
	count, _ := strconv.Atoi(os.Getenv(crashCountEnv))
	if err := ack("warm-"+randomHex(4), "warm up", min(count, 1)); err != nil {
		return fail(fmt.Errorf("warm-up: %w", err))
	}
	if err := ack(key, os.Getenv(crashPayloadEnv), count); err != nil {
		return fail(err)
	}
	if at == crashAfterCommit {
		block(crashAfterCommit)
	}
	fmt.Println(crashResult + string(outcome))
	return 0
}

// crashEnv is one crash test's database and the inbox path its children
// take.
type crashEnv struct {
	*inboxEnv
	childEnv []string
}

// runChild starts a consumer process delivering key/payload. With a crash
// point it waits for the child's marker and kills it (SIGKILL); without,
// it waits for the child to exit and returns its outcome.
func (c *crashEnv) runChild(t *testing.T, key, payload, at string) string {
	t.Helper()
	return c.runChildCounted(t, key, payload, at, 0)
}

// runChildCounted is runChild from a broker that counts deliveries: the
// child's first delivery has count (0: no count).
func (c *crashEnv) runChildCounted(t *testing.T, key, payload, at string, count int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), c.childEnv...)
	cmd.Env = append(cmd.Env, crashChildEnv+"=1", crashKeyEnv+"="+key, crashPayloadEnv+"="+payload, crashAtEnv+"="+at,
		crashCountEnv+"="+strconv.Itoa(count))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	lines := bufio.NewScanner(stdout)
	var got string
	for lines.Scan() {
		line := lines.Text()
		if at != "" && line == crashMarker+at {
			// The crash: no deferred function, no rollback, no goodbye to the database.
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			_, _ = io.Copy(io.Discard, stdout)
			err := cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "the child died of SIGKILL")
			return ""
		}
		if r, ok := strings.CutPrefix(line, crashResult); ok {
			got = r
		}
	}
	err = cmd.Wait()
	require.NoError(t, err, "child: %s", stderr.String())
	require.Empty(t, at, "the child exited without reaching %s; stderr: %s", at, stderr.String())
	return got
}

// crashBackends are every backend.
var crashBackends = backends

func setupCrash(t *testing.T, b backend, path crashPath) *crashEnv {
	t.Helper()
	c := &crashEnv{childEnv: []string{crashPathEnv + "=" + path.name}}
	switch b.dialect {
	case sqlstore.SQLite:
		dsn := sqliteDSN(filepath.Join(t.TempDir(), "crash.db"))
		b.open = func(t testing.TB) *sql.DB { return openSQLiteDSN(t, dsn) }
		c.childEnv = append(c.childEnv, crashDialectEnv+"=sqlite", crashDSNEnv+"="+dsn)
	case sqlstore.Postgres:
		c.childEnv = append(c.childEnv, crashDialectEnv+"=postgres")
	case sqlstore.MySQL:
		c.childEnv = append(c.childEnv, crashDialectEnv+"=mysql")
	}
	c.inboxEnv = setupInbox(t, b)
	c.childEnv = append(c.childEnv, crashTableEnv+"="+sqlstore.Table(c.store))
	return c
}

// forEachCrash runs fn in parallel subtests, "path/backend", on every
// backend for each of paths.
func forEachCrash(t *testing.T, paths []crashPath, fn func(t *testing.T, c *crashEnv)) {
	t.Helper()
	for _, p := range paths {
		for _, b := range crashBackends {
			t.Run(p.name+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				fn(t, setupCrash(t, b, p))
			})
		}
	}
}

func (c *crashEnv) record(t *testing.T, key string) idempotency.Record {
	t.Helper()
	rec, err := c.store.Get(t.Context(), crashNamespace, key)
	require.NoError(t, err)
	return rec
}

// (a) A crash inside the inbox transaction, after the effect's statement
// and before COMMIT: the database drops the transaction, effect and DONE
// mark alike. The redelivery waits for the dead owner's lease, takes the
// operation over (attempt 2, previous outcome unknown) and commits the
// effect: present exactly once, record DONE. From a broker without a
// delivery count both paths commit the claim before the effect's
// transaction: WithInTxClaims in the inbox, by default in the dedup step.
func TestCrashInsideTransaction(t *testing.T) {
	forEachCrash(t, crashPaths, func(t *testing.T, c *crashEnv) {
		key := "order-" + randomHex(4)
		c.runChild(t, key, "pay 10", crashInTx)

		require.Zero(t, c.count(t, key), "the uncommitted effect died with the process")
		rec := c.record(t, key)
		require.Equal(t, idempotency.StateInProgress, rec.State, "the claim was committed before the handler ran")
		require.Equal(t, 1, rec.Attempts, "the crashed attempt is counted")

		outcome := c.runChild(t, key, "pay 10", "")
		require.Equal(t, string(handler.OutcomeProcessed), outcome)
		require.Equal(t, 1, c.count(t, key), "effect exactly once")
		rec = c.record(t, key)
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 2, rec.Attempts)
		require.Equal(t, idempotency.ResultUnknown, rec.History[0].Result, "the crashed attempt")
		require.Equal(t, idempotency.ResultDone, rec.History[1].Result)
	})
}

// (b) A crash after COMMIT, before the router would ack: the broker
// redelivers, and the redelivery is a duplicate; the effect stays once.
func TestCrashAfterCommit(t *testing.T) {
	forEachCrash(t, crashPaths, func(t *testing.T, c *crashEnv) {
		key := "order-" + randomHex(4)
		c.runChild(t, key, "pay 10", crashAfterCommit)

		require.Equal(t, 1, c.count(t, key), "the effect committed")
		require.Equal(t, idempotency.StateDone, c.record(t, key).State, "with its DONE mark")

		outcome := c.runChild(t, key, "pay 10", "")
		require.Equal(t, string(handler.OutcomeDuplicate), outcome)
		require.Equal(t, 1, c.count(t, key), "effect exactly once")
		rec := c.record(t, key)
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 1, rec.Attempts)
	})
}
