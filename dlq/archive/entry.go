package archive

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/envelope"
)

// DefaultPageSize is the page size of Archive.List when Page.Limit <= 0.
const DefaultPageSize = 100

// PageLimit returns p.Limit, or DefaultPageSize when it is not positive.
func PageLimit(p Page) int {
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

// EntryFromMessage reads the envelope fields of a dead letter: the entry's
// ID is msg.UUID, its Message a copy of msg (CopyMessage), and Reason to
// DeadLetteredAt come from the surely_* metadata keys. A key that is missing
// or does not parse leaves its field zero; a message that is not an
// envelope at all (no surely_dlq_version) gives an entry with only ID and Message.
// When the message carries no dead-lettering time, DeadLetteredAt is
// archivedAt, so age windows, stats and retention still see the entry.
// Seq, Copies and ReplayedBy are the archive's to fill.
func EntryFromMessage(msg *message.Message, archivedAt time.Time) Entry {
	md := msg.Metadata
	e := Entry{
		ID:             msg.UUID,
		Message:        CopyMessage(msg),
		ArchivedAt:     archivedAt,
		Copies:         1,
		Reason:         dlq.Reason(md.Get(dlq.KeyReason)),
		OriginalTopic:  md.Get(envelope.KeyOriginalTopic),
		Handler:        md.Get(envelope.KeyHandler),
		ConsumerGroup:  md.Get(envelope.KeyConsumerGroup),
		Namespace:      md.Get(envelope.KeyNamespace),
		OperationKey:   md.Get(dlq.KeyOperationKey),
		Error:          md.Get(dlq.KeyError),
		ErrorTypes:     md.Get(envelope.KeyErrorTypes),
		DeadLetteredAt: archivedAt,
	}
	if n, err := strconv.Atoi(md.Get(envelope.KeyAttempts)); err == nil {
		e.Attempts = n
	}
	if t, err := time.Parse(time.RFC3339Nano, md.Get(envelope.KeyDeadLetteredAt)); err == nil {
		e.DeadLetteredAt = t
	}
	return e
}

// Match reports whether the filter selects e. Archives that filter in
// their own query language must select exactly what Match selects; the
// conformance suite (dlq/archivetest) checks it. Time bounds are strict:
// DeadLetteredAfter < DeadLetteredAt < DeadLetteredBefore.
func (f Filter) Match(e Entry) bool {
	switch {
	case len(f.IDs) > 0 && !slices.Contains(f.IDs, e.ID),
		f.Reason != "" && e.Reason != f.Reason,
		f.Topic != "" && e.OriginalTopic != f.Topic,
		f.Handler != "" && e.Handler != f.Handler,
		f.Key != "" && e.OperationKey != f.Key,
		f.ErrorContains != "" && !strings.Contains(e.Error, f.ErrorContains),
		!f.DeadLetteredAfter.IsZero() && !e.DeadLetteredAt.After(f.DeadLetteredAfter),
		!f.DeadLetteredBefore.IsZero() && !e.DeadLetteredAt.Before(f.DeadLetteredBefore),
		f.NotReplayedBy != "" && slices.Contains(e.ReplayedBy, f.NotReplayedBy):
		return false
	case f.ReplayID != "":
		return e.Message != nil && e.Message.Metadata.Get(envelope.KeyReplayID) == f.ReplayID
	}
	return true
}

// NewStats returns empty Stats with non-nil maps.
func NewStats() Stats {
	return Stats{
		ByReason:    map[string]int{},
		ByTopic:     map[string]int{},
		ByHandler:   map[string]int{},
		ByErrorType: map[string]int{},
	}
}

// Add counts e into s. Entries without a reason, topic, handler or error
// type are counted under the empty string, so every map sums to Total.
func (s *Stats) Add(e Entry) {
	if s.ByReason == nil {
		*s = mergeMaps(*s, NewStats())
	}
	s.Total++
	s.ByReason[string(e.Reason)]++
	s.ByTopic[e.OriginalTopic]++
	s.ByHandler[e.Handler]++
	s.ByErrorType[envelope.RootErrorType(e.ErrorTypes)]++
	if s.Oldest.IsZero() || e.DeadLetteredAt.Before(s.Oldest) {
		s.Oldest = e.DeadLetteredAt
	}
	if s.Newest.IsZero() || e.DeadLetteredAt.After(s.Newest) {
		s.Newest = e.DeadLetteredAt
	}
}

// mergeMaps keeps s's counters and fills its nil maps from empty.
func mergeMaps(s, empty Stats) Stats {
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
	return s
}

// Pruner is an Archive with an explicit retention policy: Prune deletes
// the entries dead-lettered longer ago than the retention, logs how many,
// and returns the count. Without a configured retention it deletes nothing.
type Pruner interface {
	Prune(ctx context.Context) (int, error)
}
