package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	surelynats "github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

const (
	skus         = 20
	initialStock = 1000 // per SKU: far more than its reservations take
)

// reservation is the payload of a message; its id is the operation key.
type reservation struct {
	ID       string `json:"reservation_id"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// batch is the workload and what it must come to.
type batch struct {
	messages []reservation          // in publishing order, duplicates included
	unique   map[string]reservation // every distinct reservation, by id
	unknown  map[string]bool        // the ids whose SKU does not exist
	resent   int                    // messages that repeat an earlier one
}

func sku(i int) string { return fmt.Sprintf("SKU-%02d", i) }

// makeBatch: 180 distinct reservations over the 20 SKUs, every 18th for an
// unknown SKU, and 20 of the others published twice: half of them right
// after the next reservation (so that both copies can be in flight at
// once), half at the end.
func makeBatch(suffix string) batch {
	b := batch{unique: map[string]reservation{}, unknown: map[string]bool{}}
	var late []reservation
	var pending *reservation
	for i := 1; i <= 180; i++ {
		r := reservation{
			ID:       fmt.Sprintf("rsv-%s-%03d", suffix, i),
			SKU:      sku(1 + i*7%skus),
			Quantity: 1 + i%5,
		}
		if i%18 == 0 {
			r.SKU = fmt.Sprintf("SKU-UNKNOWN-%d", i)
			b.unknown[r.ID] = true
		}
		b.unique[r.ID] = r
		b.messages = append(b.messages, r)
		if pending != nil {
			b.messages = append(b.messages, *pending)
			pending = nil
		}
		if i%9 == 4 { // never an unknown SKU
			b.resent++
			if i%2 == 0 {
				pending = &r
			} else {
				late = append(late, r)
			}
		}
	}
	b.messages = append(b.messages, late...)
	return b
}

// valid is the number of distinct reservations of a known SKU.
func (b batch) valid() int { return len(b.unique) - len(b.unknown) }

// publish sends every reservation with a message UUID of its own: the
// duplicates differ from their first copy only by the UUID, so JetStream
// stores both and surely must tell them apart by the reservation id.
func publish(ctx context.Context, natsURL, topic string, rs []reservation) error {
	pub, err := surelynats.NewPublisher(natsURL)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	defer func() { _ = pub.Close() }()
	for _, r := range rs {
		payload, err := json.Marshal(r)
		if err != nil {
			return err
		}
		msg := message.NewMessage(watermill.NewUUID(), payload)
		msg.SetContext(ctx)
		if err := pub.Publish(topic, msg); err != nil {
			return fmt.Errorf("publish %s: %w", r.ID, err)
		}
	}
	return nil
}

// openPostgres opens and pings the database; an unreachable server is an
// error that says which variable to set.
func openPostgres(ctx context.Context, rawURL string) (*sql.DB, error) {
	db, err := sql.Open("pgx", rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", postgresEnv, redact(rawURL), err)
	}
	db.SetMaxOpenConns(8) // a shared server: stay far below its connection limit
	// Keep them all: database/sql keeps 2 idle by default, and a burst
	// of consumers would open (and prepare the store's statements on) new
	// connections each time.
	db.SetMaxIdleConns(8)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("needs PostgreSQL at %s (set %s): %w", redact(rawURL), postgresEnv, err)
	}
	return db, nil
}

// redact hides a password in a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func newStore(db *sql.DB, n names) (*sqlstore.Store, error) {
	return sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(n.inbox), idempotency.WithRetention(time.Hour))
}

// createTables creates the run's tables and the inbox, and stocks every SKU.
func createTables(ctx context.Context, db *sql.DB, n names) error {
	store, err := newStore(db, n)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	for _, q := range []string{
		`CREATE TABLE ` + n.stock + ` (sku text PRIMARY KEY, quantity integer NOT NULL CHECK (quantity >= 0))`,
		// No unique constraint on reservation_id: a double effect must show.
		`CREATE TABLE ` + n.reservations + ` (reservation_id text NOT NULL, sku text NOT NULL, quantity integer NOT NULL,
			message_uuid text NOT NULL, attempt integer NOT NULL, committed_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
		`CREATE TABLE ` + n.deadLetters + ` (uuid text PRIMARY KEY, op_key text NOT NULL, reason text NOT NULL, error text NOT NULL)`,
		`INSERT INTO ` + n.stock + ` (sku, quantity) SELECT 'SKU-' || lpad(i::text, 2, '0'), ` + fmt.Sprint(initialStock) +
			` FROM generate_series(1, ` + fmt.Sprint(skus) + `) AS i`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	return nil
}

// dropTables drops the run's tables (and only those), with a deadline of
// its own: it also runs after the run's context ended.
func dropTables(db *sql.DB, n names) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+n.stock+`, `+n.reservations+`, `+n.deadLetters+`, `+n.inbox)
	if err != nil {
		return fmt.Errorf("drop the tables %s_*: %w", n.prefix, err)
	}
	return nil
}

// tally is what the database says about the reservations.
type tally struct {
	effects map[string]int    // reservation rows per reservation id
	dead    map[string]string // dead-lettered reservation id -> reason
	deadN   int               // dead letters received (distinct UUIDs)
}

func readTally(ctx context.Context, db *sql.DB, n names) (tally, error) {
	t := tally{effects: map[string]int{}, dead: map[string]string{}}
	rows, err := db.QueryContext(ctx, `SELECT reservation_id, count(*) FROM `+n.reservations+` GROUP BY reservation_id`)
	if err != nil {
		return t, err
	}
	for rows.Next() {
		var id string
		var c int
		if err := rows.Scan(&id, &c); err != nil {
			_ = rows.Close()
			return t, err
		}
		t.effects[id] = c
	}
	if err := rows.Close(); err != nil {
		return t, err
	}
	rows, err = db.QueryContext(ctx, `SELECT op_key, reason FROM `+n.deadLetters)
	if err != nil {
		return t, err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			return t, err
		}
		t.dead[id] = reason
		t.deadN++
	}
	return t, rows.Err()
}

// lost lists the reservations neither committed nor dead-lettered.
func (t tally) lost(b batch) []string {
	var out []string
	for id := range b.unique {
		if t.effects[id] == 0 && t.dead[id] == "" {
			out = append(out, id)
		}
	}
	return out
}

// committedRows counts the reservation rows.
func committedRows(ctx context.Context, db *sql.DB, n names) (int, error) {
	var c int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+n.reservations).Scan(&c)
	return c, err
}

// report checks the database against the workload and prints the summary.
// It returns the summary line, for the caller to print last.
func report(ctx context.Context, out io.Writer, db *sql.DB, n names, b batch, kills int) (summary string, err error) {
	t, err := readTally(ctx, db, n)
	if err != nil {
		return "", err
	}
	var problems []string
	decrements, double := 0, 0
	for id, c := range t.effects {
		decrements += c
		if c > 1 {
			double++
			problems = append(problems, fmt.Sprintf("%s committed %d times", id, c))
		}
		if _, ok := b.unique[id]; !ok || b.unknown[id] {
			problems = append(problems, fmt.Sprintf("%s committed but is not a valid reservation", id))
		}
	}
	lost := t.lost(b)
	for _, id := range lost {
		problems = append(problems, "lost: "+id)
	}

	// Stock: per SKU, initial - final must be the quantities of its
	// distinct reservations, and the quantities of its reservation rows.
	want := map[string]int{}
	for id, r := range b.unique {
		if !b.unknown[id] {
			want[r.SKU] += r.Quantity
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT s.sku, s.quantity, coalesce(sum(r.quantity), 0)
		FROM `+n.stock+` s LEFT JOIN `+n.reservations+` r ON r.sku = s.sku GROUP BY s.sku, s.quantity`)
	if err != nil {
		return "", err
	}
	reserved, skuRows, stockOK := 0, 0, true
	for rows.Next() {
		var s string
		var final, inRows int
		if err := rows.Scan(&s, &final, &inRows); err != nil {
			_ = rows.Close()
			return "", err
		}
		skuRows++
		reserved += initialStock - final
		if initialStock-final != want[s] || inRows != want[s] {
			stockOK = false
			problems = append(problems, fmt.Sprintf("%s: stock went down by %d, its reservation rows hold %d, its distinct reservations %d",
				s, initialStock-final, inRows, want[s]))
		}
	}
	if err := rows.Close(); err != nil {
		return "", err
	}
	if skuRows != skus {
		stockOK = false
		problems = append(problems, fmt.Sprintf("%d SKUs in the stock table, want %d", skuRows, skus))
	}

	// Dead letters: exactly the unknown-SKU reservations, once each.
	for id, reason := range t.dead {
		if !b.unknown[id] {
			problems = append(problems, fmt.Sprintf("%s dead-lettered (%s) but its SKU exists", id, reason))
		} else if reason != string(dlq.ReasonPermanent) {
			problems = append(problems, fmt.Sprintf("%s dead-lettered with reason %s, want permanent", id, reason))
		}
	}
	if t.deadN != len(b.unknown) {
		problems = append(problems, fmt.Sprintf("%d dead letters, want %d (the unknown-SKU reservations)", t.deadN, len(b.unknown)))
	}
	if kills < minKills {
		problems = append(problems, fmt.Sprintf("only %d kills, want at least %d", kills, minKills))
	}

	say(out, "stock: %d units reserved over %d SKUs, exactly the distinct reservations' quantities: %v",
		reserved, skuRows, stockOK)
	say(out, "dead letters: %d, for the %d unknown-SKU reservations", t.deadN, len(b.unknown))
	for _, p := range problems {
		say(out, "problem: %s", p)
	}
	summary = fmt.Sprintf("summary: reservations=%d unique=%d stock_decrements=%d lost=%d double_effects=%d kills=%d",
		len(b.messages), b.valid(), decrements, len(lost), double, kills)
	if len(problems) > 0 {
		return summary, fmt.Errorf("%d problems, first: %s", len(problems), problems[0])
	}
	return summary, nil
}
