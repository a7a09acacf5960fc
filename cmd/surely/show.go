package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
)

// showJSON is one dead letter decoded, in show --json.
type showJSON struct {
	entryJSON
	Version        string                      `json:"envelope_version"`
	ErrorSite      string                      `json:"error_site,omitempty"`
	Fingerprint    string                      `json:"fingerprint,omitempty"`
	FirstFailureAt string                      `json:"first_failure_at,omitempty"`
	LastFailureAt  string                      `json:"last_failure_at,omitempty"`
	TraceID        string                      `json:"trace_id,omitempty"`
	SpanID         string                      `json:"span_id,omitempty"`
	Host           string                      `json:"host,omitempty"`
	Retention      string                      `json:"dedup_retention,omitempty"`
	History        []idempotency.AttemptRecord `json:"history"`
	HistoryError   string                      `json:"history_error,omitempty"`
	// Metadata holds every key that is not one of the envelope fields above:
	// the source message's own metadata, and replay keys.
	Metadata map[string]string `json:"metadata"`
	Payload  payloadView       `json:"payload"`
}

// shownKeys are the envelope keys show prints as fields of their own.
var shownKeys = []string{
	dlq.KeyVersion, dlq.KeyReason, dlq.KeyError, dlq.KeyErrorTypes, dlq.KeyAttempts,
	dlq.KeyFirstFailureAt, dlq.KeyLastFailureAt, dlq.KeyDeadLetteredAt, dlq.KeyHistory,
	dlq.KeyOriginalTopic, dlq.KeyHandler, dlq.KeyConsumerGroup, dlq.KeyOperationKey,
	dlq.KeyFingerprint, dlq.KeyTraceID, dlq.KeySpanID, dlq.KeyHost, dlq.KeyOriginalUUID,
	dlq.KeyNamespace, dlq.KeyRetention, dlq.KeyErrorSite,
}

func decodeEntry(e archive.Entry, now time.Time) showJSON {
	out := showJSON{entryJSON: toEntryJSON(e, now), Metadata: map[string]string{}, History: []idempotency.AttemptRecord{}}
	if e.Message == nil {
		return out
	}
	md := e.Message.Metadata
	out.Version = md.Get(dlq.KeyVersion)
	out.ErrorSite = e.ErrorSite
	out.Fingerprint = md.Get(dlq.KeyFingerprint)
	out.FirstFailureAt = md.Get(dlq.KeyFirstFailureAt)
	out.LastFailureAt = md.Get(dlq.KeyLastFailureAt)
	out.TraceID = md.Get(dlq.KeyTraceID)
	out.SpanID = md.Get(dlq.KeySpanID)
	out.Host = md.Get(dlq.KeyHost)
	out.Retention = md.Get(dlq.KeyRetention)
	h, err := envelope.ParseHistory(md.Get(dlq.KeyHistory))
	if err != nil {
		out.HistoryError = fmt.Sprintf("dlq: %s: %v", dlq.KeyHistory, err)
	} else if h != nil {
		out.History = h
	}
	for k, v := range md {
		if !slices.Contains(shownKeys, k) {
			out.Metadata[k] = v
		}
	}
	out.Payload = viewPayload(e.Message.Payload)
	return out
}

func (a *app) showCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID|SEQ",
		Short: "Show one dead letter: failure context, attempt history, metadata, payload",
		Long: `show prints one archived dead letter decoded: the original message UUID,
topic, handler, operation key, reason, error and its Go error types,
its call site when known (the function and file:line where it arose),
attempts, first and last failure, trace and span ID, host, the per-attempt
history with the process and trace ID of every attempt, the other
metadata, and the payload (as text when it is valid UTF-8, else base64,
flagged as such).
It also shows where the entry stands: open, replayed (by which runs),
resolved, failed again (and the ID of its new dead letter) or discarded
(and why). ID is the dead letter's ID, or its start as ls prints it, or
its SEQ number.`,
		Example: `  surely dlq show 0b8f1c3e
  surely dlq show 42
  surely dlq show 0b8f1c3e-7d2a-5f4b-9c1d-2e3f4a5b6c7d --json | jq .history`,
		Args: exactArgs(1, "one dead-letter ID or SEQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ar, err := a.openArchive(cmd)
			if err != nil {
				return err
			}
			defer ar.close()
			ids, err := resolveRefs(cmd.Context(), ar, args)
			if err != nil {
				return err
			}
			e, err := ar.Get(cmd.Context(), ids[0])
			if err != nil {
				return fmt.Errorf("dead letter %s: %w", args[0], err)
			}
			now := a.now()
			d := decodeEntry(e, now)
			if asJSON {
				return writeJSON(a.stdout, d)
			}
			return printShow(a, d)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printShow(a *app, d showJSON) error {
	w := a.stdout
	tw := newTable(w)
	row := func(k, v string) { fprintf(tw, "%s\t%s\n", k, orDash(v)) }
	row("id:", d.ID)
	row("seq:", fmt.Sprint(d.Seq))
	row("original uuid:", d.OriginalUUID)
	row("topic:", d.Topic)
	row("handler:", d.Handler)
	row("consumer group:", d.ConsumerGroup)
	row("namespace:", d.Namespace)
	row("key:", d.Key)
	row("fingerprint:", d.Fingerprint)
	row("reason:", d.Reason)
	row("error:", d.Error)
	row("error types:", d.ErrorTypes)
	if d.ErrorSite != "" {
		row("call site:", d.ErrorSite)
	}
	row("attempts:", fmt.Sprint(d.Attempts))
	row("first failure:", d.FirstFailureAt)
	row("last failure:", d.LastFailureAt)
	row("dead-lettered:", fmt.Sprintf("%s (%s ago)", stamp(d.DeadLetteredAt), age(a.now().Sub(d.DeadLetteredAt))))
	row("archived:", fmt.Sprintf("%s (copies: %d)", stamp(d.ArchivedAt), d.Copies))
	row("trace id:", d.TraceID)
	row("span id:", d.SpanID)
	row("host:", d.Host)
	row("dedup retention:", d.Retention)
	row("replayed by:", strings.Join(d.ReplayedBy, ", "))
	state := d.State
	if d.StateAt != nil {
		state += " since " + stamp(*d.StateAt)
	}
	row("state:", state)
	row("note:", d.Note)
	row("failed again as:", d.FailedAgainAs)
	row("envelope:", "v"+d.Version)
	if err := tw.Flush(); err != nil {
		return err
	}

	fprintf(w, "\nhistory (%s):\n", plural(len(d.History), "attempt"))
	if d.HistoryError != "" {
		fprintf(w, "  unreadable: %s\n", d.HistoryError)
	}
	if len(d.History) > 0 {
		if err := printLedger(w, d.History); err != nil {
			return err
		}
	}

	fprintf(w, "\nmetadata (%d):\n", len(d.Metadata))
	tw = newTable(w)
	for _, k := range slices.Sorted(maps.Keys(d.Metadata)) {
		fprintf(tw, "  %s\t%s\n", k, d.Metadata[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	p := d.Payload
	if p.Encoding == "text" {
		fprintf(w, "\npayload (%s, text):\n%s\n", plural(p.Bytes, "byte"), p.Data)
	} else {
		fprintf(w, "\npayload (%s, NOT valid UTF-8, base64):\n%s\n", plural(p.Bytes, "byte"), p.Data)
	}
	return nil
}
