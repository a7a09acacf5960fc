package replay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/options"
)

// Names the options of this package record.
const (
	nameID               = "replay.WithID"
	nameTarget           = "replay.WithTarget"
	nameNewKey           = "replay.WithNewKey"
	nameMax              = "replay.WithMax"
	nameDryRun           = "replay.WithDryRun"
	nameForce            = "replay.WithForce"
	nameDefaultRetention = options.ReplayDefaultRetention
	nameRate             = "replay.WithRate"
	nameConcurrency      = options.ReplayConcurrency
	nameAbortAfter       = options.ReplayAbortAfter
	nameStore            = options.ReplayStore
	nameProgress         = "replay.WithProgress"
	// nameSleep is the test hook of the rate limiter's sleep (export_test.go).
	nameSleep = "replay.withSleep"
)

// resumeOptions are the options Resume takes; runOptions those Run takes:
// Resume's, and those that the saved run fixes.
var (
	resumeOptions = []string{
		nameMax, nameDryRun, nameDefaultRetention, nameRate, nameConcurrency,
		nameAbortAfter, nameStore, nameProgress, nameSleep,
		options.Logger, options.Clock, options.TracerProvider,
	}
	runOptions = append([]string{nameID, nameTarget, nameNewKey, nameForce}, resumeOptions...)
)

// newConfig applies opts, refuses those not among used (who names the
// function), and reads the configuration.
func newConfig(who string, opts []dlq.Option, used []string) (config, error) {
	s, err := options.Apply(dlq.ErrInvalidOption, opts)
	if err != nil {
		return config{}, err
	}
	if err := s.Check(dlq.ErrInvalidOption, who, used...); err != nil {
		return config{}, err
	}
	o := config{
		ID:               options.Get(s, nameID, ""),
		Target:           options.Get(s, nameTarget, ""),
		NewKey:           s.Has(nameNewKey),
		KeyMetadata:      options.Get(s, nameNewKey, ""),
		Max:              options.Get(s, nameMax, 0),
		DryRun:           options.Get(s, nameDryRun, false),
		Force:            options.Get(s, nameForce, false),
		DefaultRetention: options.Get(s, nameDefaultRetention, time.Duration(0)),
		Rate:             options.Get(s, nameRate, 0.0),
		Concurrency:      options.Get(s, nameConcurrency, 0),
		AbortAfter:       options.Get(s, nameAbortAfter, 0),
		Store:            options.Get[idempotency.Store](s, nameStore, nil),
		Logger:           options.Get[*slog.Logger](s, options.Logger, nil),
		Progress:         options.Get[func(Progress)](s, nameProgress, nil),
		TracerProvider:   options.Get[trace.TracerProvider](s, options.TracerProvider, nil),
	}
	sleep := options.Get[func(context.Context, time.Duration) error](s, nameSleep, nil)
	if now := options.Get[func() time.Time](s, options.Clock, nil); now != nil || sleep != nil {
		o.Clock = injectedClock{now: now, sleep: sleep}
	}
	return o, nil
}

// put returns an option that records v under name.
func put(name string, v any) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error { s.Put(name, v); return nil })
}

// WithID names a new run (Run; default: a new random UUID). The ID is at
// most 512 bytes without control characters: the dedup
// step uses it as ClaimRequest.Reopen.
func WithID(id string) dlq.Option { return put(nameID, id) }

// WithTarget republishes every message to topic (Run; default: each
// entry's original topic).
func WithTarget(topic string) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if topic == "" {
			return fmt.Errorf("%w: replay: empty target topic", dlq.ErrInvalidOption)
		}
		s.Put(nameTarget, topic)
		return nil
	})
}

// WithNewKey gives each replayed message a new operation key (Run): a new
// UUID (derived from the run and entry IDs, so a repeated publish of one
// entry by one run keeps it) written as the message UUID and into the
// metadata key metadataKey ("": idempotency.DefaultMetadataKey,
// "idempotency_key"; it must not start with "surely_"). The run keeps
// the key, so Resume writes the same one. The handler then sees a new
// operation, not the dead-lettered one: its dedup record (DONE or not) is
// ignored. It works only when the handler's key comes from that metadata
// key or the message UUID (the default extractor's sources), not from a
// payload field or CloudEvents attributes. It is logged.
func WithNewKey(metadataKey string) dlq.Option { return put(nameNewKey, metadataKey) }

// WithMax bounds how many messages one call publishes (0, the default: no
// bound). Refused entries do not count. A run stopped by it with entries
// left is saved "interrupted": Resume publishes the next ones.
func WithMax(n int) dlq.Option { return put(nameMax, n) }

// WithDryRun decides every entry (would replay, or refused and why) and
// reports it through WithProgress and the log, without publishing,
// marking or saving anything.
func WithDryRun() dlq.Option { return put(nameDryRun, true) }

// WithForce publishes the entries the retention guard refuses (Run; logged
// per entry).
func WithForce() dlq.Option { return put(nameForce, true) }

// WithDefaultRetention is the dedup retention of the entries whose
// envelope has no (valid) surely_dedup_retention. Without it (or 0) it is
// unknown, and such entries are refused unless WithForce.
func WithDefaultRetention(d time.Duration) dlq.Option { return put(nameDefaultRetention, d) }

// WithRate bounds publishes per second (0, the default: no bound). The
// first publish goes at once, each next one 1/rate after the previous
// one's slot: no burst, and no catching up after a slow publish.
func WithRate(perSecond float64) dlq.Option { return put(nameRate, perSecond) }

// WithConcurrency sets how many publishes may be in flight (default 1).
func WithConcurrency(n int) dlq.Option { return put(nameConcurrency, n) }

// WithAbortAfter stops the run after n consecutive re-failures (see the
// package doc); 0 means the default, 10; negative never.
func WithAbortAfter(n int) dlq.Option { return put(nameAbortAfter, n) }

// WithStore gives the handlers' dedup store: the retention guard reads
// each entry's record (Get) and refuses one that expired or is gone (see
// the package doc), and the run reads the record of each replayed message
// to confirm it done, which resets the count of consecutive re-failures.
func WithStore(store idempotency.Store) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if store == nil {
			return fmt.Errorf("%w: replay: nil store", dlq.ErrInvalidOption)
		}
		s.Put(nameStore, store)
		return nil
	})
}

// WithProgress sets a callback called after every decision, one call at a
// time (from the run's goroutines): keep it fast.
func WithProgress(fn func(Progress)) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if fn == nil {
			return fmt.Errorf("%w: replay: nil progress callback", dlq.ErrInvalidOption)
		}
		s.Put(nameProgress, fn)
		return nil
	})
}

// WithTracerProvider gives each publish a "replay <topic>" span (kind
// producer) linked to the entry's dead-letter span (the envelope's
// surely_dlq_traceparent); default: no spans. The replayed
// message's first attempt links to the dead-letter span too
// (surely_replay_link).
func WithTracerProvider(tp trace.TracerProvider) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		if tp == nil {
			return fmt.Errorf("%w: replay: nil tracer provider", dlq.ErrInvalidOption)
		}
		s.Put(options.TracerProvider, tp)
		return nil
	})
}

// withSleep replaces the sleep of the rate limiter (tests: a fake clock
// that moves forward when slept on).
func withSleep(sleep func(context.Context, time.Duration) error) dlq.Option {
	return put(nameSleep, sleep)
}
