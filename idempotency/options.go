package idempotency

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/surely-dev/surely/internal/options"
)

// ErrInvalidOption wraps every configuration error of NewExtractor and of
// the stores' constructors (memstore.New, redisstore.New, sqlstore.New).
var ErrInvalidOption = errors.New("idempotency: invalid option")

// Option configures NewExtractor or a store's constructor. The Extractor
// and every store take this one type: the options that mean the same for
// several of them (WithRetention, WithLogger, WithClock) are defined here,
// each store's own in its package (redisstore.WithPrefix,
// sqlstore.WithTable, ...). Every option validates its argument; an invalid
// one, a nil one, or one the constructor does not use makes it fail with an
// error wrapping ErrInvalidOption. Only the With functions of this package
// and of the stores make one.
type Option interface{ option }

// option hides an Option's methods: only the With functions of surely's
// packages make one.
type option = options.Option[options.Idempotency]

// Names of the Extractor's options.
const (
	optSources     = "WithSources"
	optFingerprint = "WithFingerprintMetadata"
)

// WithRetention sets how long a store keeps DONE, FAILED and EXHAUSTED
// records after their last change, and an IN_PROGRESS one after its lease
// expiry (default 24h in every store). A record is
// deduplicated only within this window: keep it longer than the longest
// redelivery or replay delay. d must be positive; redisstore and sqlstore,
// which count in milliseconds, refuse less than 1ms. A store option (not
// NewExtractor's).
func WithRetention(d time.Duration) Option {
	return options.Func[options.Idempotency](func(s *options.Set) error {
		return s.PutPositive(ErrInvalidOption, options.Retention, "retention", d)
	})
}

// WithLogger sets the logger of a store that logs: redisstore (default
// slog.Default(); warnings only) and sqlstore (default: discard). Each
// store's New says what it logs. memstore, which logs nothing, and
// NewExtractor refuse it.
func WithLogger(l *slog.Logger) Option {
	return options.Func[options.Idempotency](func(s *options.Set) error { return s.PutLogger(ErrInvalidOption, l) })
}

// WithClock replaces the clock of memstore (for deterministic tests). The
// stores whose times come from their server's clock (redisstore,
// sqlstore) refuse it, as does NewExtractor.
func WithClock(now func() time.Time) Option {
	return options.Func[options.Idempotency](func(s *options.Set) error { return s.PutClock(ErrInvalidOption, now) })
}

// WithSources sets the Extractor's key sources, tried in order. The default
// is FromMetadata(DefaultMetadataKey), then FromUUID(). An Extractor
// option.
func WithSources(sources ...KeySource) Option {
	return options.Func[options.Idempotency](func(s *options.Set) error {
		if len(sources) == 0 {
			return fmt.Errorf("%w: WithSources needs at least one source", ErrInvalidOption)
		}
		for _, src := range sources {
			if src == nil {
				return fmt.Errorf("%w: WithSources got a nil source", ErrInvalidOption)
			}
		}
		s.Put(optSources, sources)
		return nil
	})
}

// WithFingerprintMetadata adds metadata entries to the fingerprint, so that
// the same key arriving with, say, another "amount" header is a conflict.
// An Extractor option.
func WithFingerprintMetadata(keys ...string) Option {
	return options.Func[options.Idempotency](func(s *options.Set) error {
		s.Put(optFingerprint, slices.Compact(slices.Sorted(slices.Values(keys))))
		return nil
	})
}
