package archive

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/options"
)

// namePrefix is the name WithPrefix records (internal/archivekit reads it).
const namePrefix = "archive.WithPrefix"

// WithPrefix sets the prefix of the names an archive stores under: the
// key prefix of dlq/redisarchive (default "surely:dlq"; it becomes the
// Cluster hash tag of every key, so it must not contain braces) and the
// table name prefix of dlq/sqlarchive (default "surely_dlq"; it must match
// [a-z_][a-z0-9_]{0,39}). Each archive's New checks the prefix against its
// rule.
func WithPrefix(prefix string) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if prefix == "" {
			return fmt.Errorf("%w: archive: empty prefix", dlq.ErrInvalidOption)
		}
		s.Put(namePrefix, prefix)
		return nil
	})
}

// copyMessage returns a copy of msg that shares no memory with it.
func copyMessage(msg *message.Message) *message.Message {
	out := message.NewMessage(msg.UUID, slices.Clone(msg.Payload))
	for k, v := range msg.Metadata {
		out.Metadata[k] = v
	}
	return out
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
		f.Search != "" && !strings.Contains(e.OperationKey, f.Search) && !strings.Contains(e.Error, f.Search),
		f.ErrorType != "" && envelope.RootErrorType(e.ErrorTypes) != f.ErrorType,
		f.ErrorSite != "" && e.ErrorSite != f.ErrorSite,
		!f.DeadLetteredAfter.IsZero() && !e.DeadLetteredAt.After(f.DeadLetteredAfter),
		!f.DeadLetteredBefore.IsZero() && !e.DeadLetteredAt.Before(f.DeadLetteredBefore),
		f.NotReplayedBy != "" && slices.Contains(e.ReplayedBy, f.NotReplayedBy),
		f.ReplayedBy != "" && !slices.Contains(e.ReplayedBy, f.ReplayedBy),
		len(f.States) > 0 && !slices.Contains(f.States, stateOf(e)):
		return false
	case f.ReplayID != "":
		return e.Message != nil && e.Message.Metadata.Get(dlq.KeyReplayID) == f.ReplayID
	}
	return true
}

// stateOf is e's state; an entry without one is open.
func stateOf(e Entry) State {
	if e.State == "" {
		return StateOpen
	}
	return e.State
}
