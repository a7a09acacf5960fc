package archive

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
)

// Errors of an Archive.
var (
	// ErrNotFound: no archived dead letter (Get) or replay run
	// (LoadReplay) has this ID.
	ErrNotFound = errors.New("archive: not found")
	// ErrNoID is returned when a message given to an Archive has no UUID:
	// it cannot be stored idempotently. The archive stores nothing and
	// returns this error (wrapped); the caller keeps the message.
	ErrNoID = errors.New("archive: message has no UUID")
)

// Entry is one dead letter kept in an Archive.
type Entry struct {
	// ID is the dead letter's UUID: dlq's derived UUID of the source message, so
	// every copy of one message's dead letter is one entry.
	ID string
	// Seq orders entries by their first arrival in the archive: increasing,
	// never reused. Paging and replay cursors use it.
	Seq int64
	// Message is the dead letter as it was published: payload and metadata
	// byte for byte (the source's, plus the surely_* envelope keys).
	Message *message.Message
	// ArchivedAt is when the archive first stored the entry; Copies counts
	// how many times it was put (a re-delivered exhausted message is
	// dead-lettered again with the same ID).
	ArchivedAt time.Time
	Copies     int
	// Fields read from the envelope, for filtering and display.
	Reason         dlq.Reason
	OriginalTopic  string
	Handler        string
	ConsumerGroup  string
	Namespace      string
	OperationKey   string
	Error          string
	ErrorTypes     string
	Attempts       int
	DeadLetteredAt time.Time
	// ReplayedBy lists the replay runs that republished this entry, oldest first.
	ReplayedBy []string
	// State is where the entry stands in its lifecycle (see State), since
	// StateAt (zero while it never left open). Note says why it got there:
	// the reason of a discard, how a resolution was confirmed.
	State   State
	StateAt time.Time
	Note    string
	// FailedAgainAs is the ID of the dead letter of the latest replay of
	// this entry that failed again: a new open entry, whose
	// surely_replay_of names this one (and surely_replay_id the run). The
	// archive sets it when that dead letter arrives, whenever that is.
	FailedAgainAs string
	// ErrorSite is where the error arose, read from the envelope
	// (surely_error_site, see dlq.Envelope.ErrorSite); "" when not known.
	// With the root error type, it groups the failures of one cause.
	ErrorSite string
}

// State is where an archived entry stands in its lifecycle:
//
//	open ──replay run R──▶ replayed ──its operation completed──▶ resolved
//	  │                       └──failed again: FailedAgainAs = the new, open entry
//	  └──purge (with a reason)──▶ discarded (a tombstone, until the retention prunes it)
//
// Counts, metrics and the CLI speak of open entries unless told
// otherwise. A replayed entry whose message failed again leaves the open
// count: the failure goes on in its new dead letter, an open entry that
// links back to it (surely_replay_of), so one failing operation is counted
// and replayed once.
type State string

// The states of an archived entry.
const (
	// StateOpen: waiting for an operator; every new entry is open.
	StateOpen State = "open"
	// StateReplayed: a replay run republished it (the last of ReplayedBy);
	// its outcome is not known yet, or it failed again (FailedAgainAs).
	StateReplayed State = "replayed"
	// StateResolved: the replayed operation completed (its dedup record
	// is DONE).
	StateResolved State = "resolved"
	// StateDiscarded: purged by an operator, with a reason (Note); kept
	// as a tombstone until the archive's retention prunes it. A copy of it
	// that arrives later is counted (Copies) and leaves it discarded.
	StateDiscarded State = "discarded"
)

// Mark is a change of lifecycle, applied by Archive.Mark.
type Mark struct {
	// To is the new state.
	To State
	// Run is the replay run that republished the entries (required to
	// mark them replayed: it is added to Entry.ReplayedBy once) or that
	// resolved them.
	Run string
	// Note says why (required to discard: the reason), at most 1000
	// characters.
	Note string
}

// Filter selects archived entries. Zero fields match everything; set
// fields must all match.
type Filter struct {
	// IDs, when not empty, restricts the selection to these entries.
	IDs []string
	// Reason, Topic (the original topic), Handler and Key (the operation
	// key) match exactly.
	Reason  dlq.Reason
	Topic   string
	Handler string
	Key     string
	// ErrorContains matches a substring of the error text.
	ErrorContains string
	// Search matches a substring of the operation key or of the error
	// text (either): an operator's one search box.
	Search string
	// ErrorType matches the root cause's type exactly: the innermost type
	// of surely_error_types, the key of Stats.ByErrorType.
	ErrorType string
	// ErrorSite matches Entry.ErrorSite (the call site) exactly; with
	// ErrorType, it selects one failure group (Stats.ByFailureGroup).
	ErrorSite string
	// DeadLetteredAfter and DeadLetteredBefore bound the dead-lettering time
	// (an age window: "older than 1h" is DeadLetteredBefore = now-1h).
	DeadLetteredAfter, DeadLetteredBefore time.Time
	// ReplayID selects dead letters of messages that a replay run
	// republished and that failed again (their metadata carries
	// surely_replay_id = ReplayID).
	ReplayID string
	// NotReplayedBy excludes entries that this replay run already republished.
	NotReplayedBy string
	// ReplayedBy selects the entries that this replay run republished.
	ReplayedBy string
	// States, when not empty, selects the entries in one of these states.
	States []State
}

// Page asks for at most Limit entries with Seq > After, in Seq order.
// Limit <= 0 means the default page size, 100.
type Page struct {
	After int64
	Limit int
	// OmitPayload lists the entries without their payloads: each entry's
	// Message.Payload is nil, everything else (metadata included) is as
	// usual, and the archive neither reads nor transfers the payloads. For
	// listings that need only IDs and metadata (a purge, an ls), whose
	// pages of large dead letters would otherwise hold every payload in
	// memory at once.
	OmitPayload bool
}

// Stats summarises the entries a Filter selects.
type Stats struct {
	Total int
	// Counts by reason, original topic, handler and error type (the
	// innermost type of surely_error_types, the root cause).
	ByReason    map[string]int
	ByTopic     map[string]int
	ByHandler   map[string]int
	ByErrorType map[string]int
	// ByFailureGroup counts by failure group: [root error type, call
	// site] (Entry.ErrorSite, "" where the envelope names none).
	ByFailureGroup map[[2]string]int
	// ByState counts by lifecycle state.
	ByState map[string]int
	// Oldest and Newest dead-lettering times (zero when Total is 0).
	Oldest, Newest time.Time
}

// ReplayRun is the durable state of one replay, so an interrupted replay
// resumes where it stopped.
type ReplayRun struct {
	ID     string
	Filter Filter
	// Target overrides the topic messages are republished to (default: each
	// entry's original topic).
	Target string
	// NewKey: replayed messages get a fresh operation key (a deliberate
	// choice), written into the metadata key KeyMetadata.
	NewKey      bool
	KeyMetadata string
	// Force: the retention guard was overridden.
	Force bool
	// After is the cursor: the Seq of the last entry handled.
	After int64
	// Until bounds the run: it replays only entries with Seq <= Until,
	// those its filter selected when it started (replay.Run sets it, and
	// every call of the run keeps it), so the dead letters of its own
	// re-failures and entries archived later are left to another run.
	// 0: not set (a run saved before this field, or one whose filter
	// selected nothing): the next call of the run sets it at its start.
	Until int64
	// Counters of the run so far: entries republished, refused (retention
	// guard), failed again, and resolved (their operation completed).
	Replayed, Refused, Refailed, Resolved int
	// State is where the run stands.
	State            RunState
	Started, Updated time.Time
}

// RunState is where a replay run stands (ReplayRun.State).
type RunState string

// The states of a replay run.
const (
	// RunRunning: a Run or Resume call is working on it (or the process
	// running it died: nothing else marks a run that stopped unannounced).
	RunRunning RunState = "running"
	// RunInterrupted: it stopped with entries left (its context ended, or
	// a publish, mark or save failed); Resume continues it.
	RunInterrupted RunState = "interrupted"
	// RunPaused: the call published its Max (replay.WithMax) with entries
	// left, a normal end of the call; Resume continues it.
	RunPaused RunState = "paused"
	// RunAborted: it stopped itself after too many consecutive
	// re-failures; Resume continues it.
	RunAborted RunState = "aborted"
	// RunDone: every selected entry was handled.
	RunDone RunState = "done"
	// RunCanceled: an operator canceled it (surely dlq runs cancel); a
	// call running it stops at its next check. Resume continues it.
	RunCanceled RunState = "canceled"
)

// Archive keeps dead letters where an operator can list, query, replay and
// purge them. It is a Watermill publisher: pass it (with any topic) to
// dlq.NewPublisher or handler.WithDeadLetter and dead letters land in it
// directly; Publish is idempotent by message UUID (a second copy increments
// Copies). Nothing is ever evicted except by Delete or by an explicit,
// logged retention policy of the implementation.
type Archive interface {
	message.Publisher
	// Get returns one entry, or ErrNotFound.
	Get(ctx context.Context, id string) (Entry, error)
	// List returns the entries the filter selects, one page in Seq order.
	List(ctx context.Context, f Filter, p Page) ([]Entry, error)
	// Stats summarises the entries the filter selects.
	Stats(ctx context.Context, f Filter) (Stats, error)
	// Delete removes entries by ID for good and returns how many existed.
	// Operators discard instead (Mark to StateDiscarded), which keeps a
	// tombstone.
	Delete(ctx context.Context, ids ...string) (int, error)
	// Mark moves the entries to m.To, stamped with the archive's clock,
	// and returns how many exist (IDs that do not are skipped). A Mark
	// without a known state, a replayed mark without Run, or a discard
	// without Note is refused with dlq.ErrInvalidOption.
	Mark(ctx context.Context, m Mark, ids ...string) (int, error)
	// SaveReplay stores (creates or updates) a replay run; LoadReplay reads
	// it back, or ErrNotFound; ListReplays returns every run, the most
	// recently started first.
	SaveReplay(ctx context.Context, run ReplayRun) error
	LoadReplay(ctx context.Context, id string) (ReplayRun, error)
	ListReplays(ctx context.Context) ([]ReplayRun, error)
}
