package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/surely-dev/surely/internal/idem"
)

// Errors returned by every Store.
var (
	// ErrLeaseLost is returned by Complete, Release and Extend when the lease
	// is no longer the record's current, open one: the lease expired and
	// another claim took the key over (or found the budget spent and marked
	// the record EXHAUSTED), the lease already ended with Release (or, for
	// Release and Extend, with Complete), or the record is gone. Nothing
	// was changed.
	ErrLeaseLost = errors.New("idempotency: lease lost")

	// ErrNotFound is returned by Get when no record exists for the key.
	ErrNotFound = errors.New("idempotency: record not found")

	// ErrInvalidRequest wraps every validation error of a request (empty key,
	// bad namespace, non-positive lease or budget).
	ErrInvalidRequest = idem.ErrInvalidRequest
)

// Status is the result of a Claim.
type Status int

// The five results of Claim, as in the state machine of the package doc.
const (
	// Acquired: the caller owns a lease on the key and must run the handler,
	// then Complete or Release with the lease's token.
	Acquired Status = iota + 1
	// Completed: the operation already committed. Do not run the handler; ack.
	Completed
	// InProgress: another live owner holds the lease, or the last attempt
	// asked for a delay (Failure.RetryAfter) that has not passed yet. Do not
	// run, do not count a failure; nack with a delay of ClaimResult.Wait
	// (never ack).
	InProgress
	// Conflict: the key was first seen with another payload fingerprint.
	Conflict
	// Exhausted: the attempt budget is spent (or a final failure was recorded).
	// Dead-letter without running.
	Exhausted
)

func (s Status) String() string {
	switch s {
	case Acquired:
		return "acquired"
	case Completed:
		return "completed"
	case InProgress:
		return "in_progress"
	case Conflict:
		return "conflict"
	case Exhausted:
		return "exhausted"
	default:
		return fmt.Sprintf("Status(%d)", int(s))
	}
}

// State is the state of a stored record.
type State string

// Record states.
const (
	StateInProgress State = "in_progress"
	StateDone       State = "done"
	StateFailed     State = "failed"
	StateExhausted  State = "exhausted"
)

// ClaimRequest asks for a lease on one operation.
type ClaimRequest struct {
	// Namespace separates handlers (and consumer groups) sharing one store, so
	// that two handlers never share a record. It must match [A-Za-z0-9._-]{1,128}.
	Namespace string
	// Key is the operation key (see Extractor).
	Key string
	// Fingerprint of the payload; a later claim with another fingerprint gets Conflict.
	Fingerprint string
	// Lease is how long the claim is held without Extend.
	Lease time.Duration
	// MaxAttempts is the durable attempt budget: a claim made when the record
	// has already been charged MaxAttempts attempts returns Exhausted.
	MaxAttempts int
	// TraceID and SpanID of the attempt (hex, may be empty) are kept in the
	// attempt history so a redelivery chain can be followed across processes.
	TraceID, SpanID string
	// Owner names the process that makes the claim, kept in the history
	// entry of the attempt it acquires (AttemptRecord.Owner) so that an
	// operator can tell which process ran each attempt. The dedup step
	// gives this process as "host/pid"; empty means unknown. It is
	// validated like Reopen but bounded to 255 bytes (UTF-8, no control
	// characters).
	Owner string
	// Reopen is the ID of a replay run (surely_replay_id) that republished
	// this message. When set and the record is EXHAUSTED or FAILED and has
	// not yet been reopened by this ID, the store gives it a fresh budget
	// (the attempts charged so far no longer count against MaxAttempts; the
	// attempt counter itself never decreases) and remembers the ID, so a
	// redelivered copy of the replayed message does not reopen it again.
	// A DONE record is never reopened: the replay is a duplicate.
	//
	// The checks keep their order: a different fingerprint is still a
	// Conflict, a DONE record Completed, a live lease InProgress; only then
	// is a FAILED or EXHAUSTED record reopened. A claim that creates the
	// record (none was kept) remembers the ID as well, so the replayed
	// message gets one budget per run in every case. Reopen is validated
	// like an operation key (at most 512 bytes, UTF-8, no control
	// characters).
	Reopen string
}

// Validate reports whether the request is well formed.
func (r ClaimRequest) Validate() error {
	if err := idem.ValidateNamespace(r.Namespace); err != nil {
		return err
	}
	if err := idem.ValidateKey(r.Key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if r.Lease <= 0 {
		return fmt.Errorf("%w: lease must be positive, got %v", ErrInvalidRequest, r.Lease)
	}
	if r.MaxAttempts <= 0 {
		return fmt.Errorf("%w: max attempts must be positive, got %d", ErrInvalidRequest, r.MaxAttempts)
	}
	if r.Reopen != "" {
		if err := idem.ValidateKey(r.Reopen); err != nil {
			return fmt.Errorf("%w: reopen ID: %w", ErrInvalidRequest, err)
		}
	}
	return idem.ValidateOwner(r.Owner)
}

// Lease identifies an owned claim. Complete, Release and Extend succeed only
// while Token is the record's current token (fencing).
type Lease struct {
	Namespace string
	Key       string
	Token     string
	// Attempt is the number of this claim for the key, counting every claim
	// ever made (also those of processes that crashed).
	Attempt int
	// Until is when the lease expires, by the store's clock.
	Until time.Time
}

// ClaimResult is what Claim returns. Exactly one Status is set; the fields
// that belong to it are filled.
type ClaimResult struct {
	Status Status
	// Lease is set when Status is Acquired.
	Lease Lease
	// Previous is, when Status is Acquired, how the attempt before this
	// one ended: "" (none: the first attempt), ResultFailed, ResultCanceled
	// (not charged to the budget) or ResultUnknown (its owner's lease
	// expired without Complete or Release: the process died or hung, so an
	// external effect may or may not have happened; reconcile before
	// acting again).
	Previous AttemptResult
	// PreviousError is the error text of the previous attempt when
	// Previous is ResultFailed.
	PreviousError string
	// Outcome is set when Status is Completed.
	Outcome *Outcome
	// Until is when the live owner's lease expires, or when the delay the
	// last attempt asked for ends, when Status is InProgress. It is a time
	// of the store's clock: compare it with nothing of the caller's.
	Until time.Time
	// Wait is, when Status is InProgress, how long until a claim can
	// succeed, as the store measured it on its own clock: the live lease's
	// remaining time, or what is left of the last attempt's retry-after
	// delay. It is always positive then. Use it, not Until, to pace a
	// redelivery: a caller's clock may differ from the store's.
	Wait time.Duration
	// StoredFingerprint is the fingerprint the key was first claimed with, when
	// Status is Conflict.
	StoredFingerprint string
	// Attempts and History are set when Status is Exhausted.
	Attempts int
	History  []AttemptRecord
}

// StoredMessage is a message produced by a handler, kept in the outcome so a
// duplicate re-emits exactly the same messages (same UUIDs).
type StoredMessage struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  []byte            `json:"payload,omitempty"`
}

// Outcome is what a completed operation produced.
type Outcome struct {
	Messages []StoredMessage `json:"messages,omitempty"`
}

// Failure describes a failed attempt for Release.
type Failure struct {
	// Error is the (already redacted) error text.
	Error string
	// ErrorType is the chain of Go error types, outermost first.
	ErrorType string
	// Reason is the caller's short word for why the attempt failed, kept
	// as it is in the attempt history (AttemptRecord.Reason); a store never
	// interprets it. The dedup step writes the dead-letter reason
	// (dlq.Reason: "permanent", "panic", ...) of a final failure or a
	// panic, and "error", "canceled" or "succeeded" (a keyless record
	// closed) otherwise. It is a plain string, not a type of this package:
	// its words are mostly dlq's, and dlq imports this package.
	Reason string
	// Stack is a (bounded) stack trace, for panics.
	Stack string
	// Final marks the record EXHAUSTED: later claims return Exhausted without
	// running the handler (permanent error, or the last attempt of the budget).
	Final bool
	// Canceled marks an attempt that was interrupted by its context (shutdown):
	// it is not charged to the budget and Final is ignored.
	Canceled bool
	// RetryAfter is the earliest time, after the Release, at which the
	// operation may be attempted again (retry.After). When positive, and
	// neither Final nor Canceled is set, the store keeps the record's
	// NotBefore at its own now + RetryAfter; a Claim before then returns
	// InProgress with the remaining Wait, not charged to the budget.
	RetryAfter time.Duration
}

// AttemptRecord is one entry of the bounded per-key attempt history.
type AttemptRecord struct {
	Attempt int           `json:"attempt"`
	Started time.Time     `json:"started"`
	Ended   time.Time     `json:"ended,omitzero"`
	Result  AttemptResult `json:"result"`
	Error   string        `json:"error,omitempty"`
	Type    string        `json:"type,omitempty"`
	Reason  string        `json:"reason,omitempty"`
	Stack   string        `json:"stack,omitempty"`
	TraceID string        `json:"trace_id,omitempty"`
	SpanID  string        `json:"span_id,omitempty"`
	// Owner is the process that ran the attempt (ClaimRequest.Owner of
	// the claim that acquired it; "host/pid" from the dedup step), empty
	// when unknown: a claim that gave none, or a record written before
	// owners were kept.
	Owner string `json:"owner,omitempty"`
}

// AttemptResult is how one attempt ended: in the attempt history
// (AttemptRecord.Result), and, for the attempt before an acquired one, in
// ClaimResult.Previous and Operation.Previous, where the zero value ""
// means that there was none.
type AttemptResult string

// The attempt results.
const (
	// ResultInProgress: the attempt holds its lease (history only).
	ResultInProgress AttemptResult = "in_progress"
	// ResultDone: the attempt completed (history only).
	ResultDone AttemptResult = "done"
	// ResultFailed: the attempt released its claim with an error.
	ResultFailed AttemptResult = "failed"
	// ResultCanceled: the attempt was interrupted (shutdown); it was not
	// charged to the budget.
	ResultCanceled AttemptResult = "canceled"
	// ResultUnknown: the attempt's lease expired without Complete or
	// Release: its process died or hung, so an external effect may or may
	// not have happened.
	ResultUnknown AttemptResult = "unknown"
)

// Record is the stored state of one operation, as returned by Get.
type Record struct {
	Namespace   string
	Key         string
	State       State
	Fingerprint string
	// Token is the current (or last) lease token.
	Token string
	// Attempts counts every claim ever made; Canceled counts those refunded by
	// a canceled release. The budget is charged Attempts-Canceled.
	Attempts int
	Canceled int
	// BudgetBase is Attempts-Canceled when the record was last reopened by
	// a replay (ClaimRequest.Reopen), 0 if never: the budget is charged
	// Attempts-Canceled-BudgetBase.
	BudgetBase int
	// ReopenedBy is the replay ID that last reopened the record (or
	// created it), empty if none.
	ReopenedBy string
	// LeaseUntil is the lease expiry of an in-progress record.
	LeaseUntil time.Time
	// NotBefore is, for a FAILED record, the earliest time (store clock) a
	// claim may acquire it again (Failure.RetryAfter); zero if none.
	NotBefore time.Time
	Outcome   *Outcome
	History   []AttemptRecord
	// ExpiresAt is when the store forgets the record (retention).
	ExpiresAt time.Time
}

// Store keeps one record per operation and implements the state machine of
// the package doc. Implementations must be safe for concurrent use by many
// processes: the records are the only shared state, and lease times come from
// the store's clock, never the caller's.
//
// Run idempotencytest.Run against every implementation.
type Store interface {
	// Claim tries to take a lease on the operation. An error means the store
	// could not be asked (outage); nothing is known about the record then.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)
	// Complete marks the operation DONE with its outcome, kept for the
	// store's retention. ErrLeaseLost if the token is no longer current.
	//
	// Complete is idempotent per lease: a lease ends with one Complete, so
	// a Complete with the lease whose Complete was already applied (its
	// reply was lost, or its deadline passed while the store applied it)
	// is that same call re-sent: it returns nil and changes nothing (the
	// first outcome stays). A caller may therefore retry a Complete that
	// returned an error with the same lease.
	Complete(ctx context.Context, lease Lease, outcome Outcome) error
	// Release ends the lease with a failure, so that the next claim acquires
	// again at once. ErrLeaseLost if the token is no longer current.
	Release(ctx context.Context, lease Lease, failure Failure) error
	// Extend moves the lease expiry to now+d (store clock) and returns the
	// extended lease. ErrLeaseLost if the token is no longer current;
	// ErrInvalidRequest if d is not positive.
	Extend(ctx context.Context, lease Lease, d time.Duration) (Lease, error)
	// Get returns the record of an operation, or ErrNotFound.
	Get(ctx context.Context, namespace, key string) (Record, error)
}
