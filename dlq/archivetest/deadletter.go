package archivetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	dlqenv "github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/retry"
)

// published signals each successful Publish of the archive it wraps.
type published struct {
	archive.Archive
	mu   sync.Mutex
	done chan string
}

func (p *published) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Archive.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.done <- m.UUID
	}
	return nil
}

// testHandlerDeadLetter runs a surely handler on a GoChannel router with
// the archive as its dead-letter publisher: a permanently failing message
// lands in the archive with its envelope.
func testHandlerDeadLetter(t *testing.T, e *env) {
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	store, err := memstore.New()
	require.NoError(t, err)
	sink := &published{Archive: e.a, done: make(chan string, 4)}

	h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
		return nil, retry.Permanent(errors.New("card declined"))
	}, handler.WithStore(store, "charge"), handler.WithDeadLetter(sink, "dead"))
	require.NoError(t, err)

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddConsumerHandler("charge", "payments", pubSub, handler.NoPublish(h))
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(e.ctx) }()
	t.Cleanup(func() {
		_ = router.Close()
		require.NoError(t, <-runErr, "router.Run")
	})
	<-router.Running()

	src := message.NewMessage(watermill.NewUUID(), []byte{0xff, 'p', 0x00})
	src.Metadata.Set(idempotency.DefaultMetadataKey, "pay-7")
	src.Metadata.Set("tenant", "acme")
	require.NoError(t, pubSub.Publish("payments", src))

	var id string
	select {
	case id = <-sink.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no dead letter reached the archive")
	}
	require.Equal(t, dlqenv.DeadLetterUUID(src.UUID), id)
	got := e.get(id)
	require.Equal(t, dlq.ReasonPermanent, got.Reason)
	require.Equal(t, "payments", got.OriginalTopic)
	require.Equal(t, "charge", got.Handler)
	require.Equal(t, "pay-7", got.OperationKey)
	require.Contains(t, got.Error, "card declined")
	require.Equal(t, []byte(src.Payload), []byte(got.Message.Payload))
	require.Equal(t, "acme", got.Message.Metadata.Get("tenant"))
	require.Equal(t, src.UUID, got.Message.Metadata.Get(dlq.KeyOriginalUUID))
}
