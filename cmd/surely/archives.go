package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

func openRedisArchive(ctx context.Context, client *redis.Client, ep endpoint.Endpoint) (archive.Archive, error) {
	if ep.Table != "" {
		return nil, usageErr("a Redis archive takes ?prefix=, not ?table=")
	}
	prefix := redisArchivePrefix
	var opts []dlq.Option
	if ep.Prefix != "" {
		prefix = ep.Prefix
		opts = append(opts, archive.WithPrefix(ep.Prefix))
	}
	ar, err := redisarchive.New(client, opts...)
	if err != nil {
		return nil, withOptionCode(err)
	}
	if err := redisArchiveExists(ctx, client, prefix); err != nil {
		return nil, err
	}
	return ar, nil
}

// redisArchivePrefix is the key prefix of a Redis archive without
// archive.WithPrefix (its documented default).
const redisArchivePrefix = "surely:dlq"

// Bounds of the search for other archive prefixes on a Redis server.
const (
	prefixScanRounds = 50   // SCAN calls
	prefixScanCount  = 1000 // the COUNT hint of each
	prefixScanFound  = 10   // prefixes named
)

// redisArchiveExists returns an error when no archive was ever written
// under prefix: a Redis archive keeps its sequence counter ("{prefix}:seq")
// from its first entry on, even once purged. An empty answer from a wrong
// prefix would read as "no dead letters" (the SQL archive fails on its
// missing table instead). The error names the archive prefixes a bounded
// SCAN finds on the server.
func redisArchiveExists(ctx context.Context, client *redis.Client, prefix string) error {
	n, err := client.Exists(ctx, "{"+prefix+"}:seq", "{"+prefix+"}:idx").Result()
	if err != nil {
		return fmt.Errorf("look for the archive: %w", err)
	}
	if n > 0 {
		return nil
	}
	found, complete := redisArchivePrefixes(ctx, client)
	msg := fmt.Sprintf("no archive under the prefix %q on this server (no key {%s}:seq)", prefix, prefix)
	switch {
	case len(found) > 0:
		quoted := make([]string, len(found))
		for i, p := range found {
			quoted[i] = strconv.Quote(p)
		}
		msg += "; archives found under " + strings.Join(quoted, ", ") + ": set ?prefix= in the URL"
	case complete:
		msg += "; no other archive on this server either (wrong database number?)"
	default:
		msg += "; no other archive found in the keys scanned (check ?prefix= and the database number)"
	}
	return errors.New(msg)
}

// redisArchivePrefixes returns the prefixes of the archives on the server
// (keys "{P}:seq"), sorted, from at most prefixScanRounds SCAN calls, and
// whether the scan covered the whole keyspace.
func redisArchivePrefixes(ctx context.Context, client *redis.Client) ([]string, bool) {
	seen := map[string]bool{}
	var cursor uint64
	for range prefixScanRounds {
		keys, next, err := client.Scan(ctx, cursor, "{*}:seq", prefixScanCount).Result()
		if err != nil {
			return sortedKeys(seen), false
		}
		for _, k := range keys {
			if p, ok := strings.CutPrefix(k, "{"); ok {
				if p, ok = strings.CutSuffix(p, "}:seq"); ok && p != "" {
					seen[p] = true
				}
			}
		}
		if cursor = next; cursor == 0 {
			return sortedKeys(seen), true
		}
		if len(seen) >= prefixScanFound {
			break
		}
	}
	return sortedKeys(seen), false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	if len(out) > prefixScanFound {
		out = out[:prefixScanFound]
	}
	return out
}

// openSQLArchive opens the archive on db. It does not migrate: the tables
// are the application's (sqlarchive.Migrate), and a command that finds
// none says so instead of creating an empty archive.
func openSQLArchive(_ context.Context, db *sql.DB, ep endpoint.Endpoint) (archive.Archive, error) {
	if ep.Table != "" {
		return nil, usageErr("a SQL archive takes ?prefix= (of its table names), not ?table=")
	}
	dialect := map[endpoint.Kind]sqlstore.Dialect{
		endpoint.Postgres: sqlstore.Postgres, endpoint.SQLite: sqlstore.SQLite, endpoint.MySQL: sqlstore.MySQL,
	}[ep.Kind]
	var opts []dlq.Option
	if ep.Prefix != "" {
		opts = append(opts, archive.WithPrefix(ep.Prefix))
	}
	ar, err := sqlarchive.New(db, dialect, opts...)
	return ar, withOptionCode(err)
}
