package dlq_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/envelope"
)

// FuzzEnvelope builds the dead letter of an arbitrary message and failure,
// and parses it back. The payload must travel byte for byte, every original
// metadata entry outside the surely_ prefix must be kept as it was, the
// history must be valid JSON within MaxHistoryBytes that ParseEnvelope reads
// back as the newest entries in order, and Wrap must return (a history
// it cannot shrink would loop forever). The history's text fields are the
// fuzzed strings repeated 1+scale times, so that the inputs stay small (and
// quick to minimize) while the texts reach past the bounds.
func FuzzEnvelope(f *testing.F) {
	f.Add([]byte("pay 10"), "tenant", "acme", "card declined", uint8(3), "boom", "stack", "*errors.errorString", "", uint16(0))
	f.Add([]byte("\x00\xff\xfe"), "k\x00", "\xc3\x28", "\xff", uint8(20), "eeee", "ssss", "", "", uint16(1000))
	f.Add([]byte{}, "surely_reason", "forged", "", uint8(0), "", "", "", "", uint16(0))
	f.Add([]byte("x"), "", "", "secret=hunter2", uint8(1), "\x01", "", "TTTT", "", uint16(6000))
	f.Add([]byte("x"), "a", "b", "err", uint8(2), "e", "", "t", "rrrr", uint16(5000))
	f.Fuzz(func(t *testing.T, payload []byte, mdKey, mdValue, errText string, n uint8, histErr, histStack, histType, histReason string, scale uint16) {
		grow := func(s string) string { // at most 8 KiB: past the bounds once escaped, still quick
			return strings.Repeat(s, min(1+int(scale), (8<<10)/(len(s)+1)))
		}
		msg := message.NewMessage("uuid-1", bytes.Clone(payload))
		msg.Metadata.Set(mdKey, mdValue)
		msg.Metadata.Set("fixed", "kept")
		start := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
		hist := make([]idempotency.AttemptRecord, int(n)%(defaults.MaxHistory+5))
		for i := range hist {
			hist[i] = idempotency.AttemptRecord{
				Attempt: i + 1, Started: start.Add(time.Duration(i) * time.Second),
				Ended:  start.Add(time.Duration(i)*time.Second + time.Millisecond),
				Result: idempotency.ResultFailed, Error: grow(histErr), Stack: grow(histStack), Type: grow(histType), Reason: grow(histReason),
			}
		}
		var err error
		if errText != "" {
			err = errors.New(errText)
		}
		f := dlq.Failure{Reason: dlq.ReasonExhausted, Err: err, Attempts: len(hist), History: hist, OperationKey: mdValue, At: start}
		env := dlq.Wrap(msg, f, strings.ToUpper, "host", "group")

		if !bytes.Equal(env.Payload, payload) {
			t.Fatal("payload changed")
		}
		for k, v := range msg.Metadata {
			if !strings.HasPrefix(k, "surely_") && env.Metadata[k] != v {
				t.Fatalf("metadata %q: %q became %q", k, v, env.Metadata[k])
			}
		}
		if env.Metadata.Get(dlq.KeyReason) != string(dlq.ReasonExhausted) || env.Metadata.Get(dlq.KeyOriginalUUID) != "uuid-1" {
			t.Fatal("surely_ keys missing")
		}
		if len(env.Metadata.Get(dlq.KeyError)) > defaults.MaxErrorLen {
			t.Fatalf("error text of %d bytes", len(env.Metadata.Get(dlq.KeyError)))
		}
		raw := env.Metadata.Get(dlq.KeyHistory)
		if len(raw) > envelope.MaxHistoryBytes {
			t.Fatalf("history of %d bytes, the bound is %d", len(raw), envelope.MaxHistoryBytes)
		}
		if !json.Valid([]byte(raw)) {
			t.Fatalf("history is not JSON: %q", raw)
		}
		got, perr := envelope.ParseHistory(env.Metadata.Get(dlq.KeyHistory))
		if perr != nil {
			t.Fatal(perr)
		}
		if len(got) > len(hist) {
			t.Fatalf("%d entries out of %d", len(got), len(hist))
		}
		for i, h := range got {
			if want := len(hist) - len(got) + i + 1; h.Attempt != want {
				t.Fatalf("entry %d is attempt %d, want %d (newest kept, in order)", i, h.Attempt, want)
			}
		}
		if len(hist) > 0 && len(got) == 0 {
			t.Fatal("the newest attempt was dropped")
		}
		// The original message is left alone.
		if !bytes.Equal(msg.Payload, payload) || msg.Metadata.Get(dlq.KeyReason) != "" && mdKey != dlq.KeyReason {
			t.Fatal("Envelope changed its source")
		}
	})
}

// FuzzParseHistory: any surely_history text is either parsed or refused
// with an error, never a panic.
func FuzzParseHistory(f *testing.F) {
	f.Add(`[{"attempt":1,"started":"2026-01-02T03:04:05Z","result":"failed","error":"x"}]`)
	f.Add(`[]`)
	f.Add(`null`)
	f.Add(`{"attempt":1}`)
	f.Add(`[{"attempt":"1"}]`)
	f.Add(`[{"started":"not a time"}]`)
	f.Add("\xff")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := envelope.ParseHistory(s)
		if err != nil && h != nil {
			t.Fatal("entries with an error")
		}
		if err == nil && s != "" && !json.Valid([]byte(s)) {
			t.Fatalf("accepted invalid JSON %q", s)
		}
	})
}

// TestEnvelopeBoundsOneHugeEntry: a single history entry whose type,
// reason, trace or owner fields alone exceed MaxHistoryBytes used to make
// Wrap loop forever (found by FuzzEnvelope). Every text field of the
// entry is now bounded and the newest attempt is kept.
func TestEnvelopeBoundsOneHugeEntry(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("\x01", 3*envelope.MaxHistoryBytes)
	for name, e := range map[string]idempotency.AttemptRecord{
		"type":     {Type: huge},
		"reason":   {Reason: huge},
		"trace id": {TraceID: huge, SpanID: huge},
		"owner":    {Owner: huge},
		"result":   {Result: idempotency.AttemptResult(huge)},
		"all":      {Result: idempotency.AttemptResult(huge), Error: huge, Type: huge, Reason: huge, Stack: huge, TraceID: huge, SpanID: huge, Owner: huge},
	} {
		e.Attempt = 7
		env := dlq.Wrap(message.NewMessage("u", []byte("p")), dlq.Failure{Reason: dlq.ReasonExhausted, History: []idempotency.AttemptRecord{e}}, nil, "", "")
		raw := env.Metadata.Get(dlq.KeyHistory)
		if len(raw) > envelope.MaxHistoryBytes {
			t.Fatalf("%s: history of %d bytes", name, len(raw))
		}
		got, err := envelope.ParseHistory(env.Metadata.Get(dlq.KeyHistory))
		if err != nil || len(got) != 1 || got[0].Attempt != 7 {
			t.Fatalf("%s: got %+v, %v", name, got, err)
		}
	}
}
