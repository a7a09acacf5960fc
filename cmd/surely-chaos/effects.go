package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// names are one run's queues, streams, tables and keys, all with the run's
// random suffix.
type names struct {
	suffix                 string
	topic, deadTopic       string
	stream                 string // NATS stream
	group, deadGroup       string // consumer groups
	effects, markers       string // tables
	inbox                  string // sqlstore table (inbox mode)
	redisPrefix, namespace string
}

func newNames(suffix string) names {
	p := "chaos_" + suffix
	return names{
		suffix:      suffix,
		topic:       "chaos." + suffix + ".ops",
		deadTopic:   "chaos." + suffix + ".dead",
		stream:      "CHAOS_" + strings.ToUpper(suffix),
		group:       "chaos-" + suffix,
		deadGroup:   "chaos-" + suffix + "-dead",
		effects:     p + "_effects",
		markers:     p + "_markers",
		inbox:       p + "_inbox",
		redisPrefix: "surely-chaos:" + suffix + ":",
		namespace:   "chaos-ops",
	}
}

func randomSuffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// effectsDB is the database of the effects (and, in inbox mode, of the
// store): PostgreSQL or SQLite.
type effectsDB struct {
	kind string
	db   *sql.DB
	n    names
}

func openEffects(ctx context.Context, kind, dsn string, n names) (*effectsDB, error) {
	driver := "pgx"
	if kind == effectsSQLite {
		driver = "sqlite"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	if kind == effectsPostgres {
		db.SetMaxOpenConns(32)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s does not answer (set %s): %w", kind, postgresEnv, err)
	}
	return &effectsDB{kind: kind, db: db, n: n}, nil
}

func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)"
}

func (e *effectsDB) dialect() sqlstore.Dialect {
	if e.kind == effectsSQLite {
		return sqlstore.SQLite
	}
	return sqlstore.Postgres
}

// q writes a query's placeholders for the database: $1, $2... on
// PostgreSQL, ? on SQLite.
func (e *effectsDB) q(query string) string {
	if e.kind != effectsSQLite {
		return query
	}
	for i := 9; i >= 1; i-- {
		query = strings.ReplaceAll(query, "$"+strconv.Itoa(i), "?")
	}
	return query
}

// create makes the run's tables: effects (one row per operation key, n =
// how many times its effect ran) and markers (lease mode: one row per
// effect, with the attempt's fencing token and process).
func (e *effectsDB) create(ctx context.Context) error {
	for _, stmt := range []string{
		`CREATE TABLE ` + e.n.effects + ` (op_key TEXT PRIMARY KEY, n INTEGER NOT NULL)`,
		`CREATE TABLE ` + e.n.markers + ` (op_key TEXT NOT NULL, token TEXT NOT NULL, pid INTEGER NOT NULL)`,
	} {
		if _, err := e.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	return nil
}

// drop removes the run's tables, with a deadline of its own (it also runs
// after the run's context ended).
func (e *effectsDB) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var errs []error
	for _, t := range []string{e.n.effects, e.n.markers, e.n.inbox} {
		if _, err := e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+t); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// effectSQL counts one effect of an operation key.
func (e *effectsDB) effectSQL() string {
	return e.q(`INSERT INTO ` + e.n.effects + ` (op_key, n) VALUES ($1, 1)
		ON CONFLICT (op_key) DO UPDATE SET n = ` + e.n.effects + `.n + 1`)
}

func (e *effectsDB) markerSQL() string {
	return e.q(`INSERT INTO ` + e.n.markers + ` (op_key, token, pid) VALUES ($1, $2, $3)`)
}

// effected counts the operation keys with at least one effect.
func (e *effectsDB) effected(ctx context.Context) (int, error) {
	var n int
	err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM `+e.n.effects).Scan(&n)
	return n, err
}

// effectCounts returns the number of effects of every effected key.
func (e *effectsDB) effectCounts(ctx context.Context) (map[string]int, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT op_key, n FROM `+e.n.effects)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// marker is one effect of lease mode: its key, its attempt's token and the
// consumer process that ran it.
type marker struct {
	key, token string
	pid        int
}

func (e *effectsDB) allMarkers(ctx context.Context) ([]marker, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT op_key, token, pid FROM `+e.n.markers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []marker
	for rows.Next() {
		var m marker
		if err := rows.Scan(&m.key, &m.token, &m.pid); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
