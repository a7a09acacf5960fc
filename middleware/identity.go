package middleware

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/opctx"
)

// MissingKeyPolicy says what happens to a message without an operation key.
type MissingKeyPolicy int

const (
	// RejectMissingKey dead-letters a message without a key (reason no_key).
	// It is the default: a message that cannot be deduplicated is not
	// processed silently.
	RejectMissingKey MissingKeyPolicy = iota
	// ProcessWithoutDedup runs the handler without a dedup record when the
	// key is missing: nothing is ever skipped as a duplicate, so another
	// message with the same payload, or the same UUID, or a redelivery of
	// one that succeeded (its ack was lost), runs the effect again. Invalid
	// keys (too long, control characters) are still rejected. The attempts
	// stay bounded (see Dedup): only attempts that ran the handler are
	// charged, to an attempt record under the message UUID in
	// KeylessNamespace; a delivery the broker numbers as the first (a
	// delivery count of 1) runs without a store call, so a message that
	// succeeds at once costs nothing durable there. A message that keeps
	// failing is dead-lettered (reason exhausted, or panic) after the
	// budget. A success closes the record uncharged, never as done.
	ProcessWithoutDedup
)

// Identity extracts the operation identity of each message and puts it in
// the message context (the handler reads it with
// idempotency.OperationFrom), where Dedup finds it. A message without a key
// follows policy; an invalid key is a final failure with reason no_key. A
// message an adapter marked undecodable (delivery.KeyDecodeError) is a final
// failure with reason decode, before any key is looked for. A key source
// that panics is a final failure with reason panic (a *PanicError with the
// stack): without an identity there is no durable budget to retry
// against, and a panic that escaped would be redelivered without end.
func Identity(ex *idempotency.Extractor, policy MissingKeyPolicy) (message.HandlerMiddleware, error) {
	if ex == nil {
		return nil, fmt.Errorf("%w: nil extractor", ErrInvalidOption)
	}
	if policy != RejectMissingKey && policy != ProcessWithoutDedup {
		return nil, fmt.Errorf("%w: unknown missing-key policy %d", ErrInvalidOption, policy)
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if text, bad := msg.Metadata[delivery.KeyDecodeError]; bad {
				return nil, dlq.Final(dlq.ReasonDecode, fmt.Errorf("%w: %s", ErrUndecodable, text))
			}
			id, err := extract(ex, msg)
			if err != nil {
				if fe, ok := dlq.AsFinal(err); ok { // a key source panicked
					return nil, fe
				}
			}
			ctx := msg.Context()
			var op *opctx.Op
			if r := reportFrom(ctx); r != nil {
				op = &r.op
			} else {
				op = new(opctx.Op)
			}
			*op = opctx.Op{Operation: idempotency.Operation{Key: id.Key, Fingerprint: id.Fingerprint}}
			switch {
			case err == nil:
			case errors.Is(err, idempotency.ErrNoKey) && policy == ProcessWithoutDedup:
				op.Key = ""
			default:
				return nil, dlq.Final(dlq.ReasonNoKey, err)
			}
			msg.SetContext(opctx.With(ctx, op))
			defer msg.SetContext(ctx)
			msgs, err := h(msg)
			return msgs, annotate(err, op)
		}
	}, nil
}

// annotate names the operation in a final error, for the dead letter that
// runs outside this step (where the operation is no longer in the context).
// It returns err with a copy of its *dlq.FinalError (see finalCopy), never
// writing the handler's.
func annotate(err error, op *opctx.Op) error {
	if err == nil {
		return nil
	}
	fe, ok := dlq.AsFinal(err)
	if !ok {
		return err
	}
	key := fe.OperationKey == "" && (op.Key != "" || op.Fingerprint != "")
	ns := fe.Namespace == "" && (op.Namespace != "" || op.Retention != 0)
	if !key && !ns {
		return err
	}
	return editFinal(err, fe, func(cp *dlq.FinalError) {
		if key {
			cp.OperationKey, cp.Fingerprint = op.Key, op.Fingerprint
		}
		if ns {
			cp.Namespace, cp.Retention = op.Namespace, op.Retention
		}
	})
}

// KeylessNamespace is the store namespace of the attempt records of
// messages without a key (ProcessWithoutDedup). It is reserved: Dedup and
// handler.WithStore refuse it as a handler's namespace.
const KeylessNamespace = "surely.keyless"
