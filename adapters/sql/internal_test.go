package sql

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
)

func TestDecodeRow(t *testing.T) {
	msg := decodeRow(wmsql.Row{Offset: 7, UUID: []byte("u-1"), Payload: []byte("p"), Metadata: []byte(`{"k":"v"}`)}, 99)
	require.Equal(t, "u-1", msg.UUID)
	require.Equal(t, "v", msg.Metadata.Get("k"))
	_, bad := delivery.DecodeError(msg)
	require.False(t, bad)

	msg = decodeRow(wmsql.Row{Offset: 7, Payload: []byte("p"), Metadata: []byte(`null`)}, 99)
	require.Equal(t, "sql-99-7", msg.UUID, "a row without a UUID gets one stable across redeliveries")
	require.Empty(t, msg.Metadata)
	require.NotNil(t, msg.Metadata)

	for _, raw := range []string{`{"attempt": 1}`, `[1, 2]`, `"text"`} {
		msg = decodeRow(wmsql.Row{Offset: 7, UUID: []byte("u-2"), Payload: []byte("raw \x00"), Metadata: []byte(raw)}, 99)
		text, bad := delivery.DecodeError(msg)
		require.True(t, bad, raw)
		require.Contains(t, text, "metadata is not a JSON object of strings")
		require.Equal(t, raw, msg.Metadata.Get(delivery.KeyDecodeHeaders))
		require.Len(t, msg.Metadata, 2, "only the decoding keys")
		require.Equal(t, "raw \x00", string(msg.Payload))
		require.Equal(t, "u-2", msg.UUID)
	}
}

// TestLease runs in a synctest bubble: the lease's timer follows the
// bubble's fake clock, so the deadlines are checked exactly, however
// loaded the machine is.
func TestLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		expired := func(l *lease) bool {
			synctest.Wait() // let a due timer's callback run
			select {
			case <-l.expired:
				return true
			default:
				return false
			}
		}
		l := newLease(150 * time.Millisecond)
		require.False(t, l.NackAfter(time.Second), "no per-message nack delay")
		for range 4 { // 400ms in all: alive only because it is extended
			time.Sleep(100 * time.Millisecond)
			require.False(t, expired(l), "expired although extended")
			require.NoError(t, l.Extend(ctx))
		}
		time.Sleep(150*time.Millisecond - time.Nanosecond)
		require.False(t, expired(l), "expired before AckDeadline since the last extension")
		time.Sleep(time.Nanosecond)
		require.True(t, expired(l), "did not expire AckDeadline after the last extension")
		require.ErrorIs(t, l.Extend(ctx), errDeliveryExpired)

		l = newLease(50 * time.Millisecond)
		l.settle()
		time.Sleep(100 * time.Millisecond)
		require.False(t, expired(l), "a settled lease expired")
		require.ErrorIs(t, l.Extend(ctx), errDeliveryExpired)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, newLease(time.Second).Extend(cctx), context.Canceled)
	})
}

func TestSubscriberDefaults(t *testing.T) {
	c, err := newSubscriberConfig("g", nil)
	require.NoError(t, err)
	require.NotNil(t, c.logger)
	c.logger = nil
	require.Equal(t, subscriberConfig{group: "g", ackWait: 30 * time.Second, pollInterval: time.Second,
		resendInterval: 100 * time.Millisecond, batchSize: 1, closeTimeout: 30 * time.Second}, c)
	c, err = newSubscriberConfig("g", []delivery.Option{delivery.WithAckWait(minAckWait), WithBatchSize(3),
		delivery.WithCloseTimeout(time.Second)})
	require.NoError(t, err)
	require.Equal(t, minAckWait, c.ackWait, "the shortest ack wait is accepted")
	require.Equal(t, 3, c.batchSize)
	require.Equal(t, time.Second, c.closeTimeout)
}

func TestValidTopic(t *testing.T) {
	require.NoError(t, validTopic("orders.v1:eu-west_$"))
	require.NoError(t, validTopic("a23456789012345678901234567890123456789012345"), "45 bytes")
	for _, bad := range []string{"", "orders; DROP TABLE x", `or"ders`, "a234567890123456789012345678901234567890123456", "ordérs"} {
		require.ErrorIs(t, validTopic(bad), ErrInvalidTopic, bad)
	}
}
