package sqlarchive

import (
	"context"
	"fmt"
	"time"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/archivekit"
)

func init() {
	archivekit.RegisterArrivals(func(ar archive.Archive) (archivekit.Arrivals, bool) {
		a, ok := ar.(*Archive)
		if !ok {
			return nil, false
		}
		return a.arrivals, true
	})
}

// arrivals counts the entries dead-lettered per bucket (see
// archivekit.Arrivals): one GROUP BY over the dead_lettered_at index's
// range of the window, which reads the index only.
func (a *Archive) arrivals(ctx context.Context, from time.Time, width time.Duration, n int) ([]int, error) {
	if width <= 0 || n <= 0 {
		return nil, fmt.Errorf("sqlarchive: arrivals: %d buckets of %v", n, width)
	}
	div := "/"
	if a.dialect == dMySQL {
		div = "DIV" // "/" is a decimal division there
	}
	lo := from.UnixNano()
	hi := lo + int64(n)*int64(width)
	rows, err := a.db.QueryContext(ctx, a.q("SELECT (dead_lettered_at - ?) "+div+" ? AS b, COUNT(*) FROM "+a.entries+
		" WHERE dead_lettered_at >= ? AND dead_lettered_at < ? GROUP BY b"), lo, int64(width), lo, hi)
	if err != nil {
		return nil, fmt.Errorf("sqlarchive: arrivals: %w", err)
	}
	defer func() { _ = rows.Close() }()
	counts := make([]int, n)
	for rows.Next() {
		var b int64
		var k int
		if err := rows.Scan(&b, &k); err != nil {
			return nil, fmt.Errorf("sqlarchive: arrivals: %w", err)
		}
		if b >= 0 && b < int64(n) {
			counts[b] += k
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlarchive: arrivals: %w", err)
	}
	return counts, nil
}
