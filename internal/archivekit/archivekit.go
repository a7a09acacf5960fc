// Package archivekit holds what the archive implementations of surely
// (dlq/memarchive, dlq/redisarchive, dlq/sqlarchive) share and users of
// dlq/archive never name: the page size, the reading of an envelope into
// an Entry, the copying of a message and the counting of Stats.
package archivekit

import (
	"slices"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

// DefaultPageSize is the page size of Archive.List when Page.Limit <= 0
// (documented on archive.Page).
const DefaultPageSize = 100

// PageLimit returns p.Limit, or DefaultPageSize when it is not positive.
func PageLimit(p archive.Page) int {
	if p.Limit <= 0 {
		return DefaultPageSize
	}
	return p.Limit
}

// CopyMessage returns a copy of msg that shares no memory with it: its
// UUID, payload bytes and metadata, without context or ack state.
func CopyMessage(msg *message.Message) *message.Message {
	out := message.NewMessage(msg.UUID, slices.Clone(msg.Payload))
	for k, v := range msg.Metadata {
		out.Metadata[k] = v
	}
	return out
}

// Entry reads the envelope fields of a dead letter: the entry's ID is
// msg.UUID, its Message a copy of msg (CopyMessage), and Reason to
// DeadLetteredAt come from the surely_* metadata keys. A key that is
// missing or does not parse leaves its field zero; a message that is not
// an envelope at all (no dlq.KeyVersion) gives an entry with only ID and
// Message. When the message carries no dead-lettering time, DeadLetteredAt
// is archivedAt, so age windows, stats and retention still see the entry.
// Seq, Copies and ReplayedBy are the archive's to fill.
func Entry(msg *message.Message, archivedAt time.Time) archive.Entry {
	md := msg.Metadata
	e := archive.Entry{
		ID:             msg.UUID,
		Message:        CopyMessage(msg),
		ArchivedAt:     archivedAt,
		Copies:         1,
		Reason:         dlq.Reason(md.Get(dlq.KeyReason)),
		OriginalTopic:  md.Get(dlq.KeyOriginalTopic),
		Handler:        md.Get(dlq.KeyHandler),
		ConsumerGroup:  md.Get(dlq.KeyConsumerGroup),
		Namespace:      md.Get(dlq.KeyNamespace),
		OperationKey:   md.Get(dlq.KeyOperationKey),
		Error:          md.Get(dlq.KeyError),
		ErrorTypes:     md.Get(dlq.KeyErrorTypes),
		DeadLetteredAt: archivedAt,
	}
	if n, err := strconv.Atoi(md.Get(dlq.KeyAttempts)); err == nil {
		e.Attempts = n
	}
	if t, err := time.Parse(time.RFC3339Nano, md.Get(dlq.KeyDeadLetteredAt)); err == nil {
		e.DeadLetteredAt = t
	}
	return e
}

// NewStats returns empty Stats with non-nil maps.
func NewStats() archive.Stats {
	return archive.Stats{
		ByReason:    map[string]int{},
		ByTopic:     map[string]int{},
		ByHandler:   map[string]int{},
		ByErrorType: map[string]int{},
	}
}

// AddStats counts e into s. Entries without a reason, topic, handler or
// error type are counted under the empty string, so every map sums to
// Total.
func AddStats(s *archive.Stats, e archive.Entry) {
	empty := NewStats()
	if s.ByReason == nil {
		s.ByReason = empty.ByReason
	}
	if s.ByTopic == nil {
		s.ByTopic = empty.ByTopic
	}
	if s.ByHandler == nil {
		s.ByHandler = empty.ByHandler
	}
	if s.ByErrorType == nil {
		s.ByErrorType = empty.ByErrorType
	}
	s.Total++
	s.ByReason[string(e.Reason)]++
	s.ByTopic[e.OriginalTopic]++
	s.ByHandler[e.Handler]++
	s.ByErrorType[dlq.RootErrorType(e.ErrorTypes)]++
	if s.Oldest.IsZero() || e.DeadLetteredAt.Before(s.Oldest) {
		s.Oldest = e.DeadLetteredAt
	}
	if s.Newest.IsZero() || e.DeadLetteredAt.After(s.Newest) {
		s.Newest = e.DeadLetteredAt
	}
}

// PrefixOption is the name archive.WithPrefix records in the options.Set.
const PrefixOption = "archive.WithPrefix"
