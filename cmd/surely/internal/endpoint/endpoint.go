// Package endpoint parses the URLs that name the archive, the store and the
// broker of the surely command. It only parses: opening a connection is the
// command's business, so the parsing can be tested without any server.
//
// Accepted forms:
//
//	archive  redis://[user:pass@]host:port[/db][?prefix=P]
//	         postgres://user@host:port/db[?prefix=P&...]   (also postgresql://)
//	         mysql://user:pass@tcp(host:port)/db[?prefix=P]
//	         sqlite:PATH[?prefix=P] (also sqlite://PATH, file:PATH, or a bare path)
//	         mem:NAME               (an in-memory archive a test registered)
//	store    redis://...[?prefix=P], postgres://...[?table=T], sqlite:PATH[?table=T],
//	         mysql://DSN (a go-sql-driver DSN after the scheme), a bare path,
//	         or mem:NAME (an in-memory store a test registered)
//	broker   nats://host:port, amqp://user:pass@host:port/vhost (amqps://),
//	         redis://host:port[/db] (Redis Streams; rediss://)
//
// The query parameters prefix (Redis key prefix, SQL archive table prefix)
// and table (SQL store table) belong to surely and are removed
// before the rest of the URL reaches the driver.
package endpoint

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrInvalid wraps every parse error.
var ErrInvalid = errors.New("invalid URL")

// Kind is the kind of backend a URL names.
type Kind string

// Backend kinds.
const (
	Redis    Kind = "redis"
	Postgres Kind = "postgres"
	SQLite   Kind = "sqlite"
	MySQL    Kind = "mysql"
	Memory   Kind = "mem"
	NATS     Kind = "nats"
	AMQP     Kind = "amqp"
)

// Endpoint is a parsed URL.
type Endpoint struct {
	Kind Kind
	// DSN is what the driver or client receives: the URL without surely's
	// parameters (redis, postgres, nats, amqp), the file DSN of SQLite, the
	// go-sql-driver DSN of MySQL.
	DSN string
	// Path is the database file of SQLite, the name of a mem: endpoint.
	Path string
	// Prefix (Redis) and Table (SQL) come from the prefix and table query
	// parameters; empty means the backend's default.
	Prefix, Table string
}

// String names the endpoint without its password.
func (e Endpoint) String() string {
	switch e.Kind {
	case SQLite:
		return "sqlite:" + e.Path
	case Memory:
		return "mem:" + e.Path
	case MySQL:
		if at := strings.LastIndex(e.DSN, "@"); at >= 0 {
			return "mysql://" + e.DSN[at+1:]
		}
		return "mysql://" + e.DSN
	}
	u, err := url.Parse(e.DSN)
	if err != nil {
		return string(e.Kind) + "://?"
	}
	return u.Redacted()
}

// Archive parses the URL of a dead-letter archive.
func Archive(raw string) (Endpoint, error) {
	return parseData(raw, "archive", "mem:NAME")
}

// Store parses the URL of an idempotency store.
func Store(raw string) (Endpoint, error) {
	return parseData(raw, "store", "a file path")
}

// parseData parses the URL of an archive or a store (what), the kinds that
// hold data; last names the form the error message lists last.
func parseData(raw, what, last string) (Endpoint, error) {
	e, err := parse(raw)
	if err != nil {
		return e, err
	}
	switch e.Kind {
	case Redis, Postgres, SQLite, MySQL, Memory:
		return e, nil
	}
	return e, fmt.Errorf("%w: %s %q: want redis://, postgres://, mysql://, sqlite:PATH or %s", ErrInvalid, what, raw, last)
}

// Broker parses the URL of the broker replayed messages are published to.
func Broker(raw string) (Endpoint, error) {
	e, err := parse(raw)
	if err != nil {
		return e, err
	}
	switch e.Kind {
	case NATS, AMQP, Redis:
		if e.Prefix != "" || e.Table != "" {
			return e, fmt.Errorf("%w: broker %q: prefix and table are not broker parameters", ErrInvalid, raw)
		}
		return e, nil
	}
	return e, fmt.Errorf("%w: broker %q: want nats://, amqp:// or redis:// (Redis Streams)", ErrInvalid, raw)
}

func parse(raw string) (Endpoint, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return Endpoint{}, fmt.Errorf("%w: empty URL", ErrInvalid)
	}
	scheme, rest, hasScheme := strings.Cut(raw, ":")
	if !hasScheme || strings.ContainsAny(scheme, "/\\.") {
		// A bare path ("./dlq.db", "/var/lib/app.db"): SQLite.
		return sqlite(raw, raw)
	}
	switch strings.ToLower(scheme) {
	case "sqlite", "sqlite3", "file":
		return sqlite(raw, strings.TrimPrefix(rest, "//"))
	case "mem", "memory":
		return Endpoint{Kind: Memory, Path: strings.TrimPrefix(rest, "//")}, nil
	case "mysql":
		dsn := strings.TrimPrefix(rest, "//")
		if dsn == "" {
			return Endpoint{}, fmt.Errorf("%w: %q: empty MySQL DSN", ErrInvalid, raw)
		}
		base, query, _ := strings.Cut(dsn, "?")
		e := Endpoint{Kind: MySQL}
		q, err := url.ParseQuery(query)
		if err != nil {
			return e, fmt.Errorf("%w: %q: %w", ErrInvalid, raw, err)
		}
		e.Prefix = take(q, "prefix")
		e.Table = take(q, "table")
		e.DSN = base
		if len(q) > 0 {
			e.DSN += "?" + q.Encode()
		}
		return e, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	e := Endpoint{}
	switch strings.ToLower(u.Scheme) {
	case "redis", "rediss":
		e.Kind = Redis
	case "postgres", "postgresql":
		e.Kind = Postgres
	case "nats", "tls":
		e.Kind = NATS
	case "amqp", "amqps":
		e.Kind = AMQP
	default:
		return e, fmt.Errorf("%w: %q: unknown scheme %q", ErrInvalid, u.Redacted(), u.Scheme)
	}
	if u.Host == "" {
		return e, fmt.Errorf("%w: %q: no host", ErrInvalid, u.Redacted())
	}
	q := u.Query()
	e.Prefix = take(q, "prefix")
	e.Table = take(q, "table")
	u.RawQuery = q.Encode()
	e.DSN = u.String()
	return e, nil
}

func sqlite(raw, rest string) (Endpoint, error) {
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return Endpoint{}, fmt.Errorf("%w: %q: empty SQLite path", ErrInvalid, raw)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%w: %q: %w", ErrInvalid, raw, err)
	}
	e := Endpoint{Kind: SQLite, Path: path, Prefix: take(q, "prefix"), Table: take(q, "table")}
	// Concurrent writers (a consumer and this command) wait for the write
	// lock instead of failing at once.
	if !q.Has("_pragma") {
		q["_pragma"] = []string{"busy_timeout(5000)"}
	}
	e.DSN = "file:" + path + "?" + q.Encode()
	return e, nil
}

func take(q url.Values, name string) string {
	v := q.Get(name)
	q.Del(name)
	return v
}
