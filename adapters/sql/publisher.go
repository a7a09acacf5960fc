package sql

import (
	stdsql "database/sql"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// NewPublisher returns a publisher on db. Its only option is
// delivery.WithLogger; any other is refused with an error wrapping
// delivery.ErrInvalidOption. To publish inside your own transaction, use
// watermill-sql's publisher on it (or surely's outbox package).
func NewPublisher(db *stdsql.DB, opts ...delivery.Option) (*Publisher, error) {
	const who = "sql.NewPublisher"
	if db == nil {
		return nil, fmt.Errorf("%w: %s: nil db", delivery.ErrInvalidOption, who)
	}
	s, err := options.Load(delivery.ErrInvalidOption, who, opts, options.Logger)
	if err != nil {
		return nil, err
	}
	logger := options.Get(s, options.Logger, options.Warnings())
	inner, err := wmsql.NewPublisher(wmsql.BeginnerFromStdSQL(db), wmsql.PublisherConfig{
		SchemaAdapter: newSchema(batchSize),
	}, watermill.NewSlogLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", delivery.ErrInvalidOption, who, err)
	}
	return &Publisher{inner: inner}, nil
}

// Publisher is a Watermill publisher that inserts messages into a topic's
// PostgreSQL table (watermill-sql's, with its PostgreSQL schema). It never
// creates tables and never closes the *sql.DB it was given.
type Publisher struct {
	inner *wmsql.Publisher
}

var _ message.Publisher = (*Publisher)(nil)

// Publish inserts msgs into topic's messages table in one statement: all of
// them commit, or none. Publishing a message again (after an error whose
// outcome is unknown) inserts it again, with the same UUID: surely
// consumers deduplicate it.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if err := p.inner.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("sql: publish to %q (do its tables exist? InitializeSchema creates them): %w", topic, err)
	}
	return nil
}

// Close waits for the publishes in progress. It does not close the *sql.DB.
func (p *Publisher) Close() error { return p.inner.Close() }
