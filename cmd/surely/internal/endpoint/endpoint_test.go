package endpoint

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArchive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		want Endpoint
	}{
		{"redis://127.0.0.1:6379/2?prefix=app:dlq:", Endpoint{Kind: Redis, DSN: "redis://127.0.0.1:6379/2", Prefix: "app:dlq:"}},
		{"rediss://u:p@h:6380", Endpoint{Kind: Redis, DSN: "rediss://u:p@h:6380"}},
		{"postgres://app@db:5432/app?sslmode=disable&table=dead", Endpoint{Kind: Postgres, DSN: "postgres://app@db:5432/app?sslmode=disable", Table: "dead"}},
		{"postgresql://db/app", Endpoint{Kind: Postgres, DSN: "postgresql://db/app"}},
		{"sqlite:/var/lib/dlq.db", Endpoint{Kind: SQLite, Path: "/var/lib/dlq.db", DSN: "file:/var/lib/dlq.db?_pragma=busy_timeout%285000%29"}},
		{"sqlite://rel/dlq.db?table=t", Endpoint{Kind: SQLite, Path: "rel/dlq.db", Table: "t", DSN: "file:rel/dlq.db?_pragma=busy_timeout%285000%29"}},
		{"./dlq.db", Endpoint{Kind: SQLite, Path: "./dlq.db", DSN: "file:./dlq.db?_pragma=busy_timeout%285000%29"}},
		{"dlq.db", Endpoint{Kind: SQLite, Path: "dlq.db", DSN: "file:dlq.db?_pragma=busy_timeout%285000%29"}},
		{"file:x.db?_pragma=busy_timeout(1)", Endpoint{Kind: SQLite, Path: "x.db", DSN: "file:x.db?_pragma=busy_timeout%281%29"}},
		{"mem:fixture", Endpoint{Kind: Memory, Path: "fixture"}},
	} {
		got, err := Archive(tc.raw)
		require.NoError(t, err, tc.raw)
		assert.Equal(t, tc.want, got, tc.raw)
	}
	for _, raw := range []string{"", "nats://h:4222", "ftp://h/x", "redis:///0", "sqlite:", "postgres://%zz"} {
		_, err := Archive(raw)
		require.Error(t, err, raw)
		assert.True(t, errors.Is(err, ErrInvalid), raw)
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	got, err := Store("mysql://root:secret@tcp(127.0.0.1:3306)/test?table=inbox&parseTime=true")
	require.NoError(t, err)
	assert.Equal(t, Endpoint{Kind: MySQL, DSN: "root:secret@tcp(127.0.0.1:3306)/test?parseTime=true", Table: "inbox"}, got)
	assert.Equal(t, "mysql://tcp(127.0.0.1:3306)/test?parseTime=true", got.String(), "no password")
	got, err = Store("redis://:pw@127.0.0.1:6379/0?prefix=svc:")
	require.NoError(t, err)
	assert.Equal(t, "svc:", got.Prefix)
	assert.NotContains(t, got.String(), "pw")
	_, err = Store("amqp://h")
	require.ErrorIs(t, err, ErrInvalid)
}

// A mysql:// or mariadb:// URL in the usual URL form (user:pass@host:port/db)
// is converted to the driver's DSN form; one neither form reads is refused
// with both forms shown.
func TestMySQLURLForms(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]Endpoint{
		"mysql://root:s%40cret@127.0.0.1:3306/test?table=inbox&parseTime=true": {Kind: MySQL, DSN: "root:s@cret@tcp(127.0.0.1:3306)/test?parseTime=true", Table: "inbox"},
		"mariadb://root@db.example/test?prefix=app_":                           {Kind: MySQL, DSN: "root@tcp(db.example:3306)/test", Prefix: "app_"},
		"mysql://[::1]:3307/test":                                              {Kind: MySQL, DSN: "tcp([::1]:3307)/test"},
		"mariadb://root:pw@tcp(127.0.0.1:3306)/test":                           {Kind: MySQL, DSN: "root:pw@tcp(127.0.0.1:3306)/test"},
		"mysql://root@unix(/run/mysqld/mysqld.sock)/test":                      {Kind: MySQL, DSN: "root@unix(/run/mysqld/mysqld.sock)/test"},
		"mysql:///test": {Kind: MySQL, DSN: "/test"},
	} {
		got, err := Store(raw)
		require.NoError(t, err, raw)
		assert.Equal(t, want, got, raw)
	}
	for _, raw := range []string{"mysql://root@tcp(127.0.0.1:3306/test", "mariadb://root@127.0.0.1:3306", "mysql://root@127.0.0.1:x/test"} {
		_, err := Archive(raw)
		require.ErrorIs(t, err, ErrInvalid, raw)
		assert.Contains(t, err.Error(), "want mysql://user:pass@host:3306/db or mysql://user:pass@tcp(host:3306)/db", raw)
	}
}
