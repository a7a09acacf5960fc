package options

import (
	"context"
	"log/slog"
)

// Warnings returns the default logger of a constructor whose user gave
// none: records at slog.LevelWarn and above go to slog.Default() (the one
// in place when they are logged), everything else nowhere. DESIGN: a
// warning that a guarantee is weaker than the user thinks is loud by
// default; routine logs stay quiet.
func Warnings() *slog.Logger { return slog.New(warnings{}) }

// warnings is the handler behind Warnings; attrs and groups are kept as
// a chain applied to slog.Default()'s handler when a record is handled.
type warnings struct {
	with []func(slog.Handler) slog.Handler
}

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && slog.Default().Handler().Enabled(ctx, l)
}

func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	h := slog.Default().Handler()
	for _, f := range w.with {
		h = f(h)
	}
	return h.Handle(ctx, r)
}

func (w warnings) WithAttrs(attrs []slog.Attr) slog.Handler {
	return w.and(func(h slog.Handler) slog.Handler { return h.WithAttrs(attrs) })
}

func (w warnings) WithGroup(name string) slog.Handler {
	return w.and(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

func (w warnings) and(f func(slog.Handler) slog.Handler) slog.Handler {
	return warnings{with: append(w.with[:len(w.with):len(w.with)], f)}
}
