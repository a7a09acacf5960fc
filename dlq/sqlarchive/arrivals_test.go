package sqlarchive_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/archivekit"
)

// The console's arrivals chart counts per bucket in one query; the counts
// are those of the entries' dead-lettering times, each bucket closed at
// its start and open at its end.
func TestArrivals(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, b)
			from := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
			at := []time.Time{
				from.Add(-time.Nanosecond),             // before the window
				from,                                   // bucket 0, at its start
				from.Add(59 * time.Minute),             // bucket 0
				from.Add(time.Hour - time.Nanosecond),  // bucket 0, at its end
				from.Add(time.Hour),                    // bucket 1
				from.Add(2*time.Hour + 30*time.Minute), // bucket 2
				from.Add(2*time.Hour + 31*time.Minute), // bucket 2
				from.Add(3 * time.Hour),                // after the window
			}
			for i, t0 := range at {
				m := message.NewMessage(fmt.Sprintf("arrival-%d", i), nil)
				m.Metadata.Set(dlq.KeyReason, string(dlq.ReasonExhausted))
				m.Metadata.Set(dlq.KeyDeadLetteredAt, t0.Format(time.RFC3339Nano))
				require.NoError(t, a.Publish("dead", m))
			}
			count, ok := archivekit.ArrivalsOf(a)
			require.True(t, ok, "sqlarchive registers its arrivals")
			got, err := count(t.Context(), from, time.Hour, 3)
			require.NoError(t, err)
			require.Equal(t, []int{3, 1, 2}, got)
			_, err = count(t.Context(), from, 0, 3)
			require.Error(t, err, "a bucket of no width")
		})
	}
}
