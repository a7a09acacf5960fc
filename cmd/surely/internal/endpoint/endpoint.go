// Package endpoint parses the URLs that name the archive, the store and the
// broker of the surely command. It only parses: opening a connection is the
// command's business, so the parsing can be tested without any server.
//
// Accepted forms:
//
//	archive  redis://[user:pass@]host:port[/db][?prefix=P]
//	         postgres://user@host:port/db[?prefix=P&...]   (also postgresql://)
//	         mysql://user:pass@tcp(host:port)/db[?prefix=P]  (the driver's DSN form)
//	         mysql://user:pass@host[:port]/db[?prefix=P]     (a URL: converted to the DSN)
//	         (mariadb:// for either)
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
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
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
			return "mysql://" + Redact(e.DSN[at+1:])
		}
		return "mysql://" + Redact(e.DSN)
	}
	u, err := url.Parse(e.DSN)
	if err != nil {
		return string(e.Kind) + "://?"
	}
	return Redact(u.Redacted())
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
	if errors.Is(err, errUnknownScheme) {
		return e, fmt.Errorf("%w; the %s URL is one of redis://, postgres://, mysql://, sqlite:PATH or %s", err, what, last)
	}
	if err != nil {
		return e, err
	}
	switch e.Kind {
	case Redis, Postgres, SQLite, MySQL, Memory:
		return e, nil
	}
	return e, fmt.Errorf("%w: %s %q: want redis://, postgres://, mysql://, sqlite:PATH or %s", ErrInvalid, what, Redact(raw), last)
}

// errUnknownScheme marks the error of a URL whose scheme is none of the
// known ones, so that the caller can list the ones it takes.
var errUnknownScheme = errors.New("unknown scheme")

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
	case "mysql", "mariadb":
		return mysqlEndpoint(raw, strings.TrimPrefix(rest, "//"))
	}
	u, err := url.Parse(raw)
	if err != nil {
		// A *url.Error quotes the whole URL: keep only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Endpoint{}, fmt.Errorf("%w: %q: %w", ErrInvalid, Redact(raw), err)
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
		return e, fmt.Errorf("%w: %q: %w %q", ErrInvalid, Redact(raw), errUnknownScheme, u.Scheme)
	}
	if u.Host == "" {
		return e, fmt.Errorf("%w: %q: no host", ErrInvalid, Redact(raw))
	}
	q := u.Query()
	e.Prefix = take(q, "prefix")
	e.Table = take(q, "table")
	u.RawQuery = q.Encode()
	e.DSN = u.String()
	return e, nil
}

// mysqlForms are the forms of a MySQL or MariaDB URL, for errors.
const mysqlForms = "want mysql://user:pass@host:3306/db or mysql://user:pass@tcp(host:3306)/db (the driver's DSN; mariadb:// too)"

// mysqlEndpoint reads what follows mysql:// or mariadb://: the driver's
// DSN (user:pass@tcp(host:port)/db, its address in parentheses), or a
// URL's user:pass@host:port/db, which it converts to the DSN (port 3306
// by default). The result is checked as the driver will read it.
func mysqlEndpoint(raw, dsn string) (Endpoint, error) {
	if dsn == "" {
		return Endpoint{}, fmt.Errorf("%w: %q: empty MySQL DSN; %s", ErrInvalid, Redact(raw), mysqlForms)
	}
	base, query, _ := strings.Cut(dsn, "?")
	e := Endpoint{Kind: MySQL}
	q, err := url.ParseQuery(query)
	if err != nil {
		return e, fmt.Errorf("%w: %q: %w; %s", ErrInvalid, Redact(raw), err, mysqlForms)
	}
	e.Prefix = take(q, "prefix")
	e.Table = take(q, "table")
	if base, err = mysqlDSN(base); err != nil {
		return e, fmt.Errorf("%w: %q: %w; %s", ErrInvalid, Redact(raw), err, mysqlForms)
	}
	e.DSN = base
	if len(q) > 0 {
		e.DSN += "?" + q.Encode()
	}
	if _, err := mysql.ParseDSN(e.DSN); err != nil {
		return e, fmt.Errorf("%w: %q: %w; %s", ErrInvalid, Redact(raw), err, mysqlForms)
	}
	return e, nil
}

// mysqlDSN returns base (a DSN without its parameters) in the driver's
// form: as it is when it is one already (its address is empty or in
// parentheses: "/db", "user@tcp(h:3306)/db", "user@unix(/sock)/db"),
// else read as a URL's user:pass@host[:port]/db.
func mysqlDSN(base string) (string, error) {
	addr := base
	if at := strings.LastIndex(addr, "@"); at >= 0 {
		addr = addr[at+1:]
	}
	addr, _, _ = strings.Cut(addr, "/")
	if addr == "" || strings.Contains(addr, "(") {
		return base, nil
	}
	u, err := url.Parse("mysql://" + base)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", err
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", errors.New("no database name after the host")
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = u.User.Username(), "tcp", host, db
	cfg.Passwd, _ = u.User.Password()
	return cfg.FormatDSN(), nil
}

func sqlite(raw, rest string) (Endpoint, error) {
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return Endpoint{}, fmt.Errorf("%w: %q: empty SQLite path", ErrInvalid, Redact(raw))
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%w: %q: %w", ErrInvalid, Redact(raw), err)
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

// redacted replaces a password in Redact's output.
const redacted = "xxxxx"

// secretParams are the query parameters whose value Redact hides (a
// PostgreSQL URL may carry its password as ?password=).
var secretParams = []string{"password", "passwd", "pass", "pwd", "secret", "token"}

// Redact returns raw, a URL or DSN of any form (even one that does not
// parse), with the password of its user info and the values of its
// password-like query parameters replaced by "xxxxx". It never fails.
func Redact(raw string) string {
	out, _ := split(raw)
	return out
}

// Passwords returns the secrets Redact hides in raw (empty when none).
func Passwords(raw string) []string {
	_, secrets := split(raw)
	return secrets
}

// split does the work of Redact and Passwords. The user info is what
// precedes the last "@" of the authority (after "scheme://", or the whole
// DSN "user:pass@tcp(host)/db"), its password what follows its first ":".
func split(raw string) (string, []string) {
	var secrets []string
	head, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		head, rest = raw[:i+3], raw[i+3:]
	}
	query := ""
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, query = rest[:i], rest[i:]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if user, pass, ok := strings.Cut(rest[:at], ":"); ok && pass != "" {
			secrets = append(secrets, pass)
			if u, err := url.PathUnescape(pass); err == nil && u != pass {
				secrets = append(secrets, u)
			}
			rest = user + ":" + redacted + rest[at:]
		}
	}
	if query != "" {
		parts := strings.Split(query[1:], "&")
		for i, p := range parts {
			k, v, ok := strings.Cut(p, "=")
			if !ok || v == "" {
				continue
			}
			for _, name := range secretParams {
				if strings.EqualFold(k, name) {
					secrets = append(secrets, v)
					if u, err := url.QueryUnescape(v); err == nil && u != v {
						secrets = append(secrets, u)
					}
					parts[i] = k + "=" + redacted
					break
				}
			}
		}
		query = "?" + strings.Join(parts, "&")
	}
	return head + rest + query, secrets
}
