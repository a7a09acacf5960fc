package main

import (
	"context"
	"database/sql"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
)

func openRedisArchive(_ context.Context, client *redis.Client, ep endpoint.Endpoint) (dlq.Archive, error) {
	if ep.Table != "" {
		return nil, usageErr("a Redis archive takes ?prefix=, not ?table=")
	}
	var opts []redisarchive.Option
	if ep.Prefix != "" {
		opts = append(opts, redisarchive.WithPrefix(ep.Prefix))
	}
	ar, err := redisarchive.New(client, opts...)
	return ar, withOptionCode(err)
}

// openSQLArchive opens the archive on db. It does not migrate: the tables
// are the application's (sqlarchive.Migrate), and a command that finds
// none says so instead of creating an empty archive.
func openSQLArchive(_ context.Context, db *sql.DB, ep endpoint.Endpoint) (dlq.Archive, error) {
	if ep.Table != "" {
		return nil, usageErr("a SQL archive takes ?prefix= (of its table names), not ?table=")
	}
	dialect := map[endpoint.Kind]sqlarchive.Dialect{
		endpoint.Postgres: sqlarchive.Postgres, endpoint.SQLite: sqlarchive.SQLite, endpoint.MySQL: sqlarchive.MySQL,
	}[ep.Kind]
	var opts []sqlarchive.Option
	if ep.Prefix != "" {
		opts = append(opts, sqlarchive.WithPrefix(ep.Prefix))
	}
	ar, err := sqlarchive.New(db, dialect, opts...)
	return ar, withOptionCode(err)
}
