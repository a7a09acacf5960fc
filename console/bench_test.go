package console_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/surely-dev/surely/console"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/sqlarchive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/testsql"
)

// benchSize is the archive the console's pages are measured on.
const benchSize = 100_000

// BenchmarkPages measures the server time of the overview, its arrivals
// chart (an image the page loads after it) and the list pages over
// 100,000 archived dead letters (spread over two days, three
// topics, two error types) on SQLite, and on PostgreSQL when
// SURELY_POSTGRES_URL is set; each sub-benchmark reports its p95 in ms.
// It fills the archive first (a minute or more): run it on a quiet
// machine, e.g. go test -run XXX -bench Pages -benchtime 50x ./console.
func BenchmarkPages(b *testing.B) {
	for _, db := range []struct {
		name    string
		dialect sqlstore.Dialect
		open    func(testing.TB) *sql.DB
	}{
		{"sqlite", sqlstore.SQLite, func(tb testing.TB) *sql.DB {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(tb.TempDir(), "dlq.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = db.Close() })
			return db
		}},
		{"postgres", sqlstore.Postgres, testsql.Postgres},
	} {
		b.Run(db.name, func(b *testing.B) {
			h := benchConsole(b, db.open(b), db.dialect)
			for _, page := range []string{
				"/", "/list", "/list?topic=invoices", "/list?reason=permanent&q=declined",
				"/list?errtype=context.deadlineExceededError", "/list?after=90000", "/chart.svg",
			} {
				b.Run(page, func(b *testing.B) {
					var took []time.Duration
					for b.Loop() {
						start := time.Now()
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequestWithContext(b.Context(), http.MethodGet, page, nil))
						took = append(took, time.Since(start))
						if rec.Code != http.StatusOK {
							b.Fatalf("%s: %d", page, rec.Code)
						}
					}
					slices.Sort(took)
					b.ReportMetric(float64(took[len(took)*95/100].Microseconds())/1000, "p95-ms")
				})
			}
		})
	}
}

// benchConsole fills a new archive on db with benchSize dead letters and
// returns the console over it.
func benchConsole(b *testing.B, db *sql.DB, dialect sqlstore.Dialect) http.Handler {
	b.Helper()
	var r [5]byte
	_, _ = rand.Read(r[:])
	prefix := "consolebench_" + hex.EncodeToString(r[:])
	ar, err := sqlarchive.New(db, dialect, archive.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// The tables of the prefix (sqlarchive's doc names them).
		for _, table := range []string{"entries", "replayed", "runs", "seqlock", "counts"} {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+prefix+"_"+table)
		}
	})
	if err := ar.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	topics := []string{"orders", "invoices", "shipments"}
	for start := 0; start < benchSize; start += 1000 {
		batch := make([]*message.Message, 0, 1000)
		for i := start; i < start+1000; i++ {
			l := letter{
				uuid: fmt.Sprintf("bench-%d", i), topic: topics[i%3], handler: topics[i%3] + "-handler",
				key: fmt.Sprintf("key-%d", i), payload: make([]byte, 256), retention: 72 * time.Hour,
				at: t0.Add(-time.Duration(benchSize-i) * 48 * time.Hour / benchSize),
			}
			if i%7 == 0 {
				l.reason, l.err = dlq.ReasonPermanent, fmt.Errorf("card declined: %w", context.DeadlineExceeded)
			}
			batch = append(batch, deadLetter(l))
		}
		if err := ar.Publish("dead", batch...); err != nil {
			b.Fatal(err)
		}
	}
	if dialect == sqlstore.Postgres {
		// What autovacuum does within a minute or so of a bulk load:
		// PostgreSQL plans from statistics, and without them it
		// intersects bitmaps of whole indexes (list pages by topic took
		// 200-500 ms until the table was analyzed). SQLite is left as
		// most deployments leave it, never analyzed.
		if _, err := db.ExecContext(b.Context(), "ANALYZE "+prefix+"_entries"); err != nil {
			b.Fatal(err)
		}
	}
	h, err := console.New(ar, console.WithoutAuth(), dlq.WithClock(func() time.Time { return t0 }))
	if err != nil {
		b.Fatal(err)
	}
	return h
}
