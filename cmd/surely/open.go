package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" database/sql driver
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// connectTimeout bounds the first contact with a server.
const connectTimeout = 10 * time.Second

// archiveConn is an open archive and what closes its connection.
type archiveConn struct {
	archive.Archive
	closers []func() error
}

func (c *archiveConn) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		_ = c.closers[i]()
	}
}

// storeConn is an open store and what closes its connection.
type storeConn struct {
	idempotency.Store
	closers []func() error
}

func (c *storeConn) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		_ = c.closers[i]()
	}
}

// flagValue reads a string flag of cmd (after the environment was applied).
func flagValue(cmd *cobra.Command, name string) string {
	f := cmd.Flags().Lookup(name)
	if f == nil {
		return ""
	}
	return f.Value.String()
}

func (a *app) openArchive(cmd *cobra.Command) (*archiveConn, error) {
	raw := flagValue(cmd, "archive")
	if raw == "" {
		return nil, usageErr("no archive: pass --archive URL or set SURELY_ARCHIVE_URL (redis://host:6379/0, postgres://user@host:5432/db, mysql://user:pass@tcp(host:3306)/db or sqlite:PATH)")
	}
	a.secretsOf(raw)
	ep, err := endpoint.Archive(raw)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), connectTimeout)
	defer cancel()
	c, err := a.dialArchive(ctx, ep)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w%s", ep, err, unreachableHint(err))
	}
	return c, nil
}

func (a *app) dialArchive(ctx context.Context, ep endpoint.Endpoint) (*archiveConn, error) {
	switch ep.Kind {
	case endpoint.Memory:
		ar, ok := a.memArchives[ep.Path]
		if !ok {
			return nil, withCode(exitUsage, errors.New("mem: archives exist only inside the command's tests"))
		}
		return &archiveConn{Archive: ar}, nil
	case endpoint.Redis:
		client, err := redisClient(ctx, ep)
		if err != nil {
			return nil, err
		}
		ar, err := openRedisArchive(ctx, client, ep)
		if err != nil {
			_ = client.Close()
			return nil, err
		}
		return &archiveConn{Archive: ar, closers: []func() error{client.Close}}, nil
	case endpoint.Postgres, endpoint.SQLite, endpoint.MySQL:
		db, err := openDB(ctx, ep)
		if err != nil {
			return nil, err
		}
		ar, err := openSQLArchive(ctx, db, ep)
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		return &archiveConn{Archive: ar, closers: []func() error{db.Close}}, nil
	}
	return nil, withCode(exitUsage, fmt.Errorf("unsupported archive kind %s", ep.Kind))
}

func (a *app) openStore(cmd *cobra.Command) (*storeConn, error) {
	raw := flagValue(cmd, "store")
	if raw == "" {
		return nil, usageErr("no store: pass --store URL or set SURELY_STORE_URL (redis://host:6379/0, postgres://user@host:5432/db, mysql://user:pass@tcp(host:3306)/db or sqlite:PATH)")
	}
	a.secretsOf(raw)
	ep, err := endpoint.Store(raw)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	if p := flagValue(cmd, "store-prefix"); p != "" {
		ep.Prefix = p
	}
	if t := flagValue(cmd, "store-table"); t != "" {
		ep.Table = t
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), connectTimeout)
	defer cancel()
	c, err := a.dialStore(ctx, ep)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w%s", ep, err, unreachableHint(err))
	}
	return c, nil
}

func (a *app) dialStore(ctx context.Context, ep endpoint.Endpoint) (*storeConn, error) {
	switch ep.Kind {
	case endpoint.Memory:
		st, ok := a.memStores[ep.Path]
		if !ok {
			return nil, withCode(exitUsage, errors.New("mem: stores exist only inside the command's tests"))
		}
		return &storeConn{Store: st}, nil
	case endpoint.Redis:
		client, err := redisClient(ctx, ep)
		if err != nil {
			return nil, err
		}
		var opts []idempotency.Option
		if ep.Prefix != "" {
			opts = append(opts, redisstore.WithPrefix(ep.Prefix))
		}
		st, err := redisstore.New(ctx, client, opts...)
		if err != nil {
			_ = client.Close()
			return nil, withOptionCode(err)
		}
		return &storeConn{Store: st, closers: []func() error{client.Close}}, nil
	case endpoint.Postgres, endpoint.SQLite, endpoint.MySQL:
		if ep.Prefix != "" {
			return nil, usageErr("a key prefix applies to a Redis store only")
		}
		db, err := openDB(ctx, ep)
		if err != nil {
			return nil, err
		}
		dialect := map[endpoint.Kind]sqlstore.Dialect{
			endpoint.Postgres: sqlstore.Postgres, endpoint.SQLite: sqlstore.SQLite, endpoint.MySQL: sqlstore.MySQL,
		}[ep.Kind]
		var opts []idempotency.Option
		if ep.Table != "" {
			opts = append(opts, sqlstore.WithTable(ep.Table))
		}
		st, err := sqlstore.New(db, dialect, opts...)
		if err != nil {
			_ = db.Close()
			return nil, withOptionCode(err)
		}
		return &storeConn{Store: st, closers: []func() error{db.Close}}, nil
	}
	return nil, withCode(exitUsage, fmt.Errorf("unsupported store kind %s", ep.Kind))
}

// withOptionCode makes an invalid option of a store or an archive (a bad
// prefix or table name) a usage error.
func withOptionCode(err error) error {
	if errors.Is(err, idempotency.ErrInvalidOption) || errors.Is(err, dlq.ErrInvalidOption) {
		return withCode(exitUsage, err)
	}
	return err
}

// redisClient connects to the Redis of ep and checks that it answers.
func redisClient(ctx context.Context, ep endpoint.Endpoint) (*redis.Client, error) {
	opts, err := redis.ParseURL(ep.DSN)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("ping: %w", err)
	}
	return client, nil
}

// openDB opens and pings the SQL database of ep. A SQLite file must exist:
// the command never creates an empty database by mistake.
func openDB(ctx context.Context, ep endpoint.Endpoint) (*sql.DB, error) {
	driver := map[endpoint.Kind]string{endpoint.Postgres: "pgx", endpoint.SQLite: "sqlite", endpoint.MySQL: "mysql"}[ep.Kind]
	if ep.Kind == endpoint.SQLite {
		if err := fileExists(ep.Path); err != nil {
			return nil, err
		}
	}
	db, err := sql.Open(driver, ep.DSN)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	db.SetMaxOpenConns(4)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("ping: %w", err)
	}
	return db, nil
}

func fileExists(path string) error {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("SQLite database: %w (check the path; surely migrate up creates a new database)", err)
		}
		return fmt.Errorf("SQLite database: %w", err)
	}
	return nil
}

// unreachableHint is what to check when a server did not answer: the
// error is a refused or timed-out connection, or a name that does not
// resolve.
func unreachableHint(err error) string {
	var (
		op  *net.OpError
		dns *net.DNSError
	)
	switch {
	case errors.As(err, &dns):
		return " (check the host name in the URL)"
	case errors.As(err, &op), errors.Is(err, context.DeadlineExceeded):
		return " (is the server running, and are the URL's host and port right?)"
	}
	return ""
}
