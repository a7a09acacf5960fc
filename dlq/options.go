package dlq

import (
	"errors"
	"log/slog"
	"time"

	"github.com/surely-dev/surely/internal/options"
)

// ErrInvalidOption wraps every configuration error of the dead-letter
// family: dlq, dlq/archive, dlq/memarchive, dlq/redisarchive,
// dlq/sqlarchive and dlq/replay.
var ErrInvalidOption = errors.New("dlq: invalid option")

// Option configures a constructor of the dead-letter family: NewPublisher,
// archive.Ingest, archive.RegisterMetrics, memarchive.New,
// redisarchive.New, sqlarchive.New, replay.Run and replay.Resume. The
// options common to several of them are defined here; those of one
// package (archive.WithPrefix, replay.WithRate, ...) in that
// package. A constructor given an option it does not use returns an error
// wrapping ErrInvalidOption: an option that does not apply is never
// silently ignored. Only the With functions of the dead-letter packages
// (and console) make one.
type Option interface{ option }

// option hides an Option's methods: only the With functions of surely's
// packages make one.
type option = options.Option[options.DLQ]

// Names of the publisher's options, as the Set records them. The options
// of one package record a name prefixed with the package
// ("replay.WithRate").
const (
	nameRedactor      = options.Redactor
	nameConsumerGroup = "WithConsumerGroup"
)

// WithLogger sets the logger of a constructor of the family. What it logs,
// and the default when the option is not given, is in each constructor's
// doc.
func WithLogger(l *slog.Logger) Option {
	return options.Func[options.DLQ](func(s *options.Set) error { return s.PutLogger(ErrInvalidOption, l) })
}

// WithClock replaces the time source (default time.Now), for
// deterministic tests: an archive stamps ArchivedAt and measures the age
// Prune deletes by with it, the archive gauges their cache and ages, a
// replay run its retention guard, its rate limiter's schedule and its
// saved times.
func WithClock(now func() time.Time) Option {
	return options.Func[options.DLQ](func(s *options.Set) error { return s.PutClock(ErrInvalidOption, now) })
}

// WithRetention makes an archive's Prune (memarchive, redisarchive,
// sqlarchive) delete the entries dead-lettered more than d ago. Without
// it the archive keeps everything and Prune deletes nothing.
func WithRetention(d time.Duration) Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		return s.PutPositive(ErrInvalidOption, options.Retention, "retention", d)
	})
}
