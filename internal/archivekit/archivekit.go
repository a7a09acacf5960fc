// Package archivekit holds what the archive implementations of surely
// (dlq/memarchive, dlq/redisarchive, dlq/sqlarchive) share and users of
// dlq/archive never name: the page size, the reading of an envelope into
// an Entry, the copying of a message and the counting of Stats.
package archivekit

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/envelope"
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
// DeadLetteredAt and ErrorSite come from the surely_* metadata keys. A key
// that is missing or does not parse leaves its field zero; a message that
// is not an envelope at all (no dlq.KeyVersion) gives an entry with
// only ID and Message. When the message carries no dead-lettering time, DeadLetteredAt
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
		ErrorSite:      md.Get(dlq.KeyErrorSite),
		DeadLetteredAt: archivedAt,
		State:          archive.StateOpen,
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
		ByState:     map[string]int{},

		ByFailureGroup: map[[2]string]int{},
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
	if s.ByState == nil {
		s.ByState = empty.ByState
	}
	if s.ByFailureGroup == nil {
		s.ByFailureGroup = empty.ByFailureGroup
	}
	s.Total++
	s.ByReason[string(e.Reason)]++
	s.ByTopic[e.OriginalTopic]++
	s.ByHandler[e.Handler]++
	s.ByErrorType[envelope.RootErrorType(e.ErrorTypes)]++
	s.ByFailureGroup[[2]string{envelope.RootErrorType(e.ErrorTypes), e.ErrorSite}]++
	s.ByState[string(StateOf(e))]++
	if s.Oldest.IsZero() || e.DeadLetteredAt.Before(s.Oldest) {
		s.Oldest = e.DeadLetteredAt
	}
	if s.Newest.IsZero() || e.DeadLetteredAt.After(s.Newest) {
		s.Newest = e.DeadLetteredAt
	}
}

// PrefixOption is the name archive.WithPrefix records in the options.Set.
const PrefixOption = "archive.WithPrefix"

// StateOf is e's state; an entry without one is open.
func StateOf(e archive.Entry) archive.State {
	if e.State == "" {
		return archive.StateOpen
	}
	return e.State
}

// States are the states of an archived entry, in lifecycle order.
var States = []archive.State{archive.StateOpen, archive.StateReplayed, archive.StateResolved, archive.StateDiscarded}

// MaxNote is the longest Mark.Note, in characters (documented on
// archive.Mark).
const MaxNote = 1000

// CheckMark refuses a Mark that names no known state, marks replayed
// without a run (or with a run ID holding a NUL byte, which the Redis
// archive uses as separator), discards without a note, or has a note
// longer than MaxNote.
func CheckMark(m archive.Mark) error {
	switch {
	case !slices.Contains(States, m.To):
		return fmt.Errorf("%w: archive: mark to unknown state %q", dlq.ErrInvalidOption, m.To)
	case m.To == archive.StateReplayed && m.Run == "":
		return fmt.Errorf("%w: archive: a replayed mark needs the replay run", dlq.ErrInvalidOption)
	case strings.ContainsRune(m.Run, 0):
		return fmt.Errorf("%w: archive: replay run ID %q", dlq.ErrInvalidOption, m.Run)
	case m.To == archive.StateDiscarded && strings.TrimSpace(m.Note) == "":
		return fmt.Errorf("%w: archive: a discard needs a reason (Note)", dlq.ErrInvalidOption)
	case utf8.RuneCountInString(m.Note) > MaxNote:
		return fmt.Errorf("%w: archive: a note of %d characters (at most %d)", dlq.ErrInvalidOption, utf8.RuneCountInString(m.Note), MaxNote)
	}
	return nil
}

// ApplyMark applies m to e at now (m checked by CheckMark): a replayed
// mark adds the run to ReplayedBy once.
func ApplyMark(e *archive.Entry, m archive.Mark, now time.Time) {
	if m.To == archive.StateReplayed && !slices.Contains(e.ReplayedBy, m.Run) {
		e.ReplayedBy = append(e.ReplayedBy, m.Run)
	}
	e.State, e.StateAt, e.Note = m.To, now, m.Note
}

// SortRuns orders replay runs the most recently started first (then by ID).
func SortRuns(runs []archive.ReplayRun) {
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].Started.Equal(runs[j].Started) {
			return runs[i].Started.After(runs[j].Started)
		}
		return runs[i].ID < runs[j].ID
	})
}
