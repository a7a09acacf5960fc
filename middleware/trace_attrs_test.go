package middleware_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/middleware"
)

// An in-process retry's link to the previous attempt names that attempt's
// number.
func TestTracePreviousAttemptLinkNamesAttempt(t *testing.T) {
	t.Parallel()
	r := setup(t, failTimes(2, errFlaky), 3)
	msg, _ := r.produce(t, "m-1", `{"order":1}`)
	_, err := r.h(msg)
	require.NoError(t, err)
	spans := r.spans("process")
	require.Len(t, spans, 3)
	for i := 1; i < len(spans); i++ {
		la, ok := linkTo(spans[i], spans[i-1].SpanContext())
		require.True(t, ok, "attempt %d links to attempt %d", i+1, i)
		assert.Equal(t, int64(i), la[middleware.AttrAttempt].AsInt64(), "attempt %d's link", i+1)
	}
}

// The span carries the broker's delivery count when the broker reports
// one (Count > 0), and no count otherwise.
func TestTraceDeliveryCountOnlyWhenReported(t *testing.T) {
	t.Parallel()
	for _, count := range []int{3, 0} {
		r := setup(t, failTimes(0, errFlaky), 1)
		msg, _ := r.produce(t, "m-1", `{"order":1}`)
		msg.SetContext(delivery.WithInfo(msg.Context(), delivery.Info{Count: count, Redelivered: count > 1}))
		_, err := r.h(msg)
		require.NoError(t, err)
		spans := r.spans("process")
		require.Len(t, spans, 1)
		got, present := int64(0), false
		for _, kv := range spans[0].Attributes() {
			if kv.Key == middleware.AttrDeliveryCount {
				got, present = kv.Value.AsInt64(), true
			}
		}
		assert.Equal(t, count > 0, present, "count %d", count)
		assert.Equal(t, int64(count), got, "count %d", count)
	}
}
