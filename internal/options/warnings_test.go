package options

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Not parallel: it replaces slog.Default().
func TestWarningsGoToTheDefaultLogger(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })

	l := Warnings().With("adapter", "x").WithGroup("g")
	l.Info("routine")
	l.Debug("detail")
	l.Warn("weaker guarantee", "k", "v")
	l.Error("failed")
	out := buf.String()
	if strings.Contains(out, "routine") || strings.Contains(out, "detail") {
		t.Errorf("info and debug records reached the default logger:\n%s", out)
	}
	for _, want := range []string{`msg="weaker guarantee" adapter=x g.k=v`, `msg=failed adapter=x`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
