package middleware

import (
	"fmt"
	"log/slog"

	"github.com/surely-dev/surely/internal/options"
)

// Option configures Dedup, Observe or Trace: the three steps take this one
// type. Each option says which step takes it; a step given an option it
// does not take fails with an error wrapping ErrInvalidOption (an option
// that does not apply is a configuration error, never silently ignored),
// as does an option that rejects its value. Only the With functions of
// this package make one.
type Option interface{ option }

// option hides an Option's methods: only the With functions of surely's
// packages make one.
type option = options.Option[options.Middleware]

// Names of this package's own options; the shared ones (WithLogger,
// WithMeterProvider) are in internal/options.
const (
	optLease         = "WithLease"
	optMaxAttempts   = "WithMaxAttempts"
	optExtension     = "WithExtension"
	optStoreTimeout  = "WithStoreTimeout"
	optRedactor      = "WithHistoryRedactor"
	optOnOutcome     = "WithOnOutcome"
	optPropagator    = "WithPropagator"
	optSystem        = "WithMessagingSystem"
	optConsumerGroup = "WithConsumerGroup"
)

// WithLogger sets the logger of Dedup and of Observe, each using it for
// its own records:
//
//   - Dedup logs only warnings (default: slog.Default(), read when a
//     warning is logged): a handler canceled for outliving the longest
//     lease hold, a lease lost or not extended, a Complete retried, a
//     replay ID ignored. Each says that a guarantee is weaker than
//     expected for one message; Dedup logs nothing per message otherwise.
//   - Observe logs the outcome of every delivery (default: discard).
//     Records are logged with the message context, so trace IDs
//     correlate.
func WithLogger(l *slog.Logger) Option {
	return options.Func[options.Middleware](func(s *options.Set) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		s.Put(options.Logger, l)
		return nil
	})
}
