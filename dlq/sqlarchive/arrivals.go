package sqlarchive

import (
	"context"
	"fmt"
	"time"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

var _ archive.ArrivalCounter = (*Archive)(nil)

// Arrivals counts the entries dead-lettered per bucket
// (archive.ArrivalCounter): one GROUP BY over the dead_lettered_at
// index's range of the window, which reads the index only.
func (a *Archive) Arrivals(ctx context.Context, from time.Time, width time.Duration, n int) ([]int, error) {
	if width <= 0 || n <= 0 {
		return nil, fmt.Errorf("%w: sqlarchive: arrivals: %d buckets of %v", dlq.ErrInvalidOption, n, width)
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
