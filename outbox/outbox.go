package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/internal/options"
)

// defaultTable is the outbox table unless WithTable names another.
const defaultTable = "surely_outbox"

// consumerGroup is the forwarders' row in the offsets table.
const consumerGroup = "surely_forwarder"

// purgeBatch is how many rows one DELETE of Purge removes at most.
const purgeBatch = 10_000

// ErrInvalidOption wraps every configuration error of New and Forwarder.
var ErrInvalidOption = errors.New("outbox: invalid option")

// Outbox is a transactional outbox on a PostgreSQL database: Publisher
// writes events into a transaction, Forwarder moves the committed ones to a
// broker. It is safe for concurrent use, keeps no state besides its
// configuration and starts no goroutine (a Forwarder does, until Close).
//
// It never closes the *sql.DB it was given: the caller owns it and closes it
// after the last call (and after closing the forwarders).
type Outbox struct {
	db      *sql.DB
	table   string
	schema  wsql.DefaultPostgreSQLSchema
	offsets wsql.DefaultPostgreSQLOffsetsAdapter
}

// Option configures New (WithTable) or Outbox.Forwarder (the other
// options). Every option validates its argument; an invalid one, or one
// the constructor does not take, makes it fail with an error wrapping
// ErrInvalidOption. Only the With functions of this package make one.
type Option interface{ option }

// option hides an Option's methods: only the With functions of surely's
// packages make one.
type option = options.Option[options.Outbox]

const optTable = "WithTable"

var tableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// WithTable sets the outbox table (default "surely_outbox"); the offsets
// table is name + "_offsets". The name must match [a-z_][a-z0-9_]{0,47}, as
// sqlstore's tables: lower case, and short enough for the derived names to
// fit PostgreSQL's 63 bytes. It is quoted in every statement; to use another
// schema, set the connection's search_path. It is also the forwarder's
// watermill topic. Each outbox (table) has its own forwarders.
func WithTable(name string) Option {
	return options.Func[options.Outbox](func(s *options.Set) error {
		if !tableRE.MatchString(name) {
			return fmt.Errorf("%w: table name %q must match [a-z_][a-z0-9_]{0,47}", ErrInvalidOption, name)
		}
		s.Put(optTable, name)
		return nil
	})
}

// New returns an outbox on db, a PostgreSQL database (13 or later) opened
// with a database/sql driver (github.com/jackc/pgx/v5/stdlib, lib/pq). It
// neither connects nor touches the schema: call Migrate (or create the
// tables in your migrations) first. The inbox's sqlstore.Store must use the
// same database, or the event and the state do not share the transaction.
//
// The outbox never closes db.
func New(db *sql.DB, opts ...Option) (*Outbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidOption)
	}
	set, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(ErrInvalidOption, "outbox.New", optTable); err != nil {
		return nil, err
	}
	o := &Outbox{db: db, table: options.Get(set, optTable, defaultTable)}
	messages, offsets := quoteIdent(o.table), quoteIdent(o.offsetsTable())
	o.schema = wsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: func(string) string { return messages },
		// Migrate's own lock rather than the one every watermill-sql user
		// shares (advisory locks are per database).
		InitializeSchemaLock: wsql.DefaultSchemaInitializationLock("surely_outbox"),
	}
	o.offsets = wsql.DefaultPostgreSQLOffsetsAdapter{
		GenerateMessagesOffsetsTableName: func(string) string { return offsets },
	}
	return o, nil
}

// offsetsTable is the name of the forwarders' offsets table.
func (o *Outbox) offsetsTable() string { return o.table + "_offsets" }

// Migrate creates the outbox table and the offsets table unless they exist,
// running the CREATE TABLE IF NOT EXISTS statements of watermill-sql's
// PostgreSQL adapters (see the package doc) in one transaction, under an
// advisory lock so that concurrent Migrates wait for each other. It is
// idempotent and the only DDL of the package.
func (o *Outbox) Migrate(ctx context.Context) error {
	qs, err := o.schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: o.table})
	if err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", o.table, err)
	}
	oqs, err := o.offsets.SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams{Topic: o.table})
	if err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", o.offsetsTable(), err)
	}
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: migrate %s: begin: %w", o.table, err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, q := range append(qs, oqs...) {
		if _, err := tx.ExecContext(ctx, q.Query, q.Args...); err != nil {
			return fmt.Errorf("outbox: migrate %s: %w", o.table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: migrate %s: commit: %w", o.table, err)
	}
	return nil
}

// Publisher returns a message.Publisher that inserts messages into the
// outbox in tx, each in Watermill's forwarder envelope with its destination
// topic, UUID, metadata and payload. They reach the forwarder when tx
// commits and never if it rolls back. Messages of one Publish call are
// forwarded in their order.
//
// tx must be a transaction on the outbox's database; Publisher never
// commits, rolls it back or closes it, and Close of the returned publisher
// does nothing. The insert runs with the first message's context.
// Publishing no message is a no-op; a nil message, an empty topic or a nil
// tx is an error. See the package doc on returning Publish's error.
func (o *Outbox) Publisher(tx *sql.Tx) message.Publisher {
	if tx == nil {
		return txPublisher{err: errors.New("outbox: Publisher was given a nil *sql.Tx")}
	}
	pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: o.schema}, nil)
	if err != nil { // only for a nil adapter or executor: not here
		return txPublisher{err: fmt.Errorf("outbox: %w", err)}
	}
	return txPublisher{table: o.table, pub: forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: o.table})}
}

type txPublisher struct {
	table string
	pub   *forwarder.Publisher
	err   error
}

func (p txPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.err != nil {
		return p.err
	}
	if topic == "" {
		return errors.New("outbox: publish: empty topic")
	}
	if len(msgs) == 0 {
		return nil
	}
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("outbox: publish to %q: message %d is nil", topic, i)
		}
	}
	if err := p.pub.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("outbox: publish to %q through %s: %w", topic, p.table, err)
	}
	return nil
}

// Close does nothing: the transaction is the caller's.
func (txPublisher) Close() error { return nil }

// forwarded is the condition on a row m of the outbox, joined with the
// forwarders' row o of the offsets table, that the row was forwarded: the
// subscriber's position is (last_processed_transaction_id, offset_acked),
// and it reads only rows after it.
const forwarded = `(m."transaction_id", m."offset") <= (o.last_processed_transaction_id, o.offset_acked)`

// Pending returns how many committed events the forwarders have not
// forwarded yet (all of them before the first forwarder ran). A number that
// keeps growing means the forwarders are down, or stuck on an event their
// publisher refuses.
func (o *Outbox) Pending(ctx context.Context) (int64, error) {
	q := `SELECT COUNT(*) FROM ` + quoteIdent(o.table) + ` m WHERE NOT EXISTS (SELECT 1 FROM ` +
		quoteIdent(o.offsetsTable()) + ` o WHERE o.consumer_group = $1 AND ` + forwarded + `)`
	var n int64
	if err := o.db.QueryRowContext(ctx, q, consumerGroup).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: pending in %s: %w", o.table, err)
	}
	return n, nil
}

// Purge deletes the rows of the outbox that were forwarded, in batches of
// 10,000, and returns how many it deleted. Rows not yet forwarded stay. It
// is safe while forwarders run (they only read rows after their position,
// which only moves forward); call it periodically from one process.
func (o *Outbox) Purge(ctx context.Context) (int64, error) {
	q := `DELETE FROM ` + quoteIdent(o.table) + ` WHERE ("transaction_id", "offset") IN (SELECT m."transaction_id", m."offset" FROM ` +
		quoteIdent(o.table) + ` m JOIN ` + quoteIdent(o.offsetsTable()) + ` o ON o.consumer_group = $1 WHERE ` + forwarded +
		` ORDER BY m."transaction_id", m."offset" LIMIT $2)`
	var total int64
	for {
		res, err := o.db.ExecContext(ctx, q, consumerGroup, purgeBatch)
		if err != nil {
			return total, fmt.Errorf("outbox: purge %s: %w", o.table, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("outbox: purge %s: %w", o.table, err)
		}
		total += n
		if n < purgeBatch {
			return total, nil
		}
	}
}

// quoteIdent quotes a validated identifier (no quote inside).
func quoteIdent(name string) string { return `"` + name + `"` }
