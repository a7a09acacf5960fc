package sql

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
)

// schema is watermill-sql's DefaultPostgreSQLSchema with BYTEA payloads and
// an UnmarshalMessage that never fails on a row's content: a row whose
// metadata is not a JSON object of strings would otherwise fail every query
// of the subscription, forever, and hold up every row after it.
type schema struct {
	wmsql.DefaultPostgreSQLSchema
}

func newSchema(batch int) schema {
	return schema{wmsql.DefaultPostgreSQLSchema{
		GeneratePayloadType: func(string) string { return "BYTEA" },
		SubscribeBatchSize:  batch,
	}}
}

func (s schema) UnmarshalMessage(p wmsql.UnmarshalMessageParams) (wmsql.Row, error) {
	var r wmsql.Row
	var xid wmsql.XID8
	if err := p.Row.Scan(&r.Offset, &xid, &r.UUID, &r.Payload, &r.Metadata); err != nil {
		return wmsql.Row{}, fmt.Errorf("could not scan message row: %w", err)
	}
	r.ExtraData = map[string]any{"transaction_id": xid}
	r.Msg = decodeRow(r, uint64(xid))
	return r, nil
}

// decodeRow builds the message of a row. A row whose metadata cannot be
// decoded becomes a message marked undecodable: delivery.KeyDecodeError
// holds the error, "surely_decode_headers" the metadata column as it was
// (JSON, since the column's type is), the payload is the row's. A row
// without a UUID gets "sql-<transaction id>-<offset>", stable across
// redeliveries.
func decodeRow(r wmsql.Row, xid uint64) *message.Message {
	id := string(r.UUID)
	if id == "" {
		id = "sql-" + strconv.FormatUint(xid, 10) + "-" + strconv.FormatInt(r.Offset, 10)
	}
	msg := message.NewMessage(id, r.Payload)
	if r.Metadata == nil {
		return msg
	}
	var md message.Metadata
	if err := json.Unmarshal(r.Metadata, &md); err != nil {
		msg.Metadata = message.Metadata{
			delivery.KeyDecodeError:   "metadata is not a JSON object of strings: " + err.Error(),
			delivery.KeyDecodeHeaders: string(r.Metadata),
		}
		return msg
	}
	if md != nil {
		msg.Metadata = md
	}
	return msg
}

// InitializeSchema creates, unless they exist, the messages and offsets
// tables of each topic, with the statements of watermill-sql's PostgreSQL
// adapters (CREATE TABLE IF NOT EXISTS, payload BYTEA), in one transaction
// under watermill-sql's advisory lock. It never changes an existing table.
// Neither the Publisher nor the Subscriber creates tables: call it at
// start, or run the same DDL in your migrations (PostgreSQL 13 or later:
// xid8). db belongs to the caller.
func InitializeSchema(ctx context.Context, db *stdsql.DB, topics ...string) error {
	if len(topics) == 0 {
		return fmt.Errorf("%w: sql.InitializeSchema: no topics", delivery.ErrInvalidOption)
	}
	s := newSchema(batchSize)
	var queries []wmsql.Query
	for i, topic := range topics {
		if err := validTopic(topic); err != nil {
			return err
		}
		q, err := s.SchemaInitializingQueries(wmsql.SchemaInitializingQueriesParams{Topic: topic})
		if err != nil {
			return err
		}
		if i > 0 {
			q = q[1:] // the advisory lock, taken once
		}
		o, err := wmsql.DefaultPostgreSQLOffsetsAdapter{}.SchemaInitializingQueries(wmsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
		if err != nil {
			return err
		}
		queries = append(append(queries, q...), o...)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sql: initialize schema: %w", err)
	}
	for _, q := range queries {
		if _, err := tx.ExecContext(ctx, q.Query, q.Args...); err != nil {
			return errors.Join(fmt.Errorf("sql: initialize schema: %w", err), tx.Rollback())
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sql: initialize schema: %w", err)
	}
	return nil
}
