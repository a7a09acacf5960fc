package endpoint

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testPassword = "s3cr3t-pw"

// TestParseErrorsRedactPassword: no parse error quotes a password, whatever
// the path that refuses the URL (wrong kind, unknown scheme, url.Parse
// failure, a bad query). Broker URLs are opened in cmd/surely (brokers.go),
// whose TestBrokerURLErrors holds them to the same rule.
func TestParseErrorsRedactPassword(t *testing.T) {
	t.Parallel()
	parsers := map[string]func(string) (Endpoint, error){"archive": Archive, "store": Store}
	for _, tc := range []struct{ parser, raw string }{
		{"archive", "amqp://app:s3cr3t-pw@127.0.0.1:5672/"},
		{"archive", "nats://app:s3cr3t-pw@127.0.0.1:4222"},
		{"store", "amqp://app:s3cr3t-pw@127.0.0.1:5672/"},
		{"archive", "postgres://app:s3cr3t-pw@db:5432/%zz"},
		{"archive", "postgres://app:s3cr3t-pw@db:bad port/app"},
		{"archive", "mysql://root:s3cr3t-pw@tcp(127.0.0.1:3306)/test?prefix=%zz"},
		{"store", "mysql://root:s3cr3t-pw@tcp(127.0.0.1:3306)/test?table=%zz"},
		{"archive", "ftp://app:s3cr3t-pw@h/x"},
		{"archive", "redis://app:s3cr3t-pw@/0"},
		{"archive", "app:s3cr3t-pw@h"},
		{"archive", "sqlite:db.sqlite?x=%zz&password=s3cr3t-pw"},
	} {
		_, err := parsers[tc.parser](tc.raw)
		require.ErrorIs(t, err, ErrInvalid, tc.raw)
		assert.NotContains(t, err.Error(), testPassword, "%s %s", tc.parser, tc.raw)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"redis://:s3cr3t-pw@127.0.0.1:6379/0":                  "redis://:xxxxx@127.0.0.1:6379/0",
		"amqp://guest:s3cr3t-pw@h:5672/":                       "amqp://guest:xxxxx@h:5672/",
		"postgres://app:s3cr3t-pw@db:bad port/app":             "postgres://app:xxxxx@db:bad port/app",
		"mysql://root:s3cr3t-pw@tcp(127.0.0.1:3306)/test?x=1":  "mysql://root:xxxxx@tcp(127.0.0.1:3306)/test?x=1",
		"root:s3cr3t-pw@tcp(h)/db":                             "root:xxxxx@tcp(h)/db",
		"root:s3:cr@t-pw@tcp(h)/db":                            "root:xxxxx@tcp(h)/db",
		"postgres://db/app?sslmode=disable&password=s3cr3t-pw": "postgres://db/app?sslmode=disable&password=xxxxx",
		"postgres://app@db/app":                                "postgres://app@db/app",
		"sqlite:/var/lib/dlq.db":                               "sqlite:/var/lib/dlq.db",
	} {
		got := Redact(raw)
		assert.Equal(t, want, got, raw)
		assert.NotContains(t, got, testPassword, raw)
	}
	assert.Equal(t, []string{testPassword}, Passwords("amqp://guest:s3cr3t-pw@h:5672/"))
	assert.Equal(t, []string{testPassword}, Passwords("postgres://db/app?password=s3cr3t-pw"))
	assert.Empty(t, Passwords("postgres://app@db/app"))
}
