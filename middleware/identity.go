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

// Identity extracts the operation identity of each message and puts it in
// the message context (the handler reads it with
// idempotency.OperationFrom), where Dedup finds it. A message without a key
// follows policy (delivery.RejectMissingKey or delivery.ProcessWithoutDedup;
// see the package doc); an invalid key is a final failure with reason
// no_key. A message an adapter marked undecodable (delivery.KeyDecodeError)
// is a final failure with reason decode, before any key is looked for. A key source
// that panics is a final failure with reason panic (a *PanicError with the
// stack): without an identity there is no durable budget to retry
// against, and a panic that escaped would be redelivered without end.
func Identity(ex *idempotency.Extractor, policy delivery.MissingKeyPolicy) (message.HandlerMiddleware, error) {
	if ex == nil {
		return nil, fmt.Errorf("%w: nil extractor", ErrInvalidOption)
	}
	if policy != delivery.RejectMissingKey && policy != delivery.ProcessWithoutDedup {
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
			case errors.Is(err, idempotency.ErrNoKey) && policy == delivery.ProcessWithoutDedup:
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
