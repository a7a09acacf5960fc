package sql

import wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

// ErrDeliveryExpired is what Extend returns once the ack wait passed.
var ErrDeliveryExpired = errDeliveryExpired

// MessagesTable returns the quoted name of topic's messages table.
func MessagesTable(topic string) string { return wmsql.DefaultPostgreSQLSchema{}.MessagesTable(topic) }

// OffsetsTable returns the quoted name of topic's offsets table.
func OffsetsTable(topic string) string {
	return wmsql.DefaultPostgreSQLOffsetsAdapter{}.MessagesOffsetsTable(topic)
}
