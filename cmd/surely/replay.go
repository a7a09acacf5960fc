package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
)

// exitInterrupted is the status of a replay stopped by Ctrl-C (SIGINT),
// as a shell reports a process killed by SIGINT.
const exitInterrupted = 130

type replayDecision struct {
	Seq    int64  `json:"seq"`
	ID     string `json:"id"`
	Topic  string `json:"topic"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

type replayJSON struct {
	RunID       string           `json:"run_id"`
	DryRun      bool             `json:"dry_run"`
	State       string           `json:"state,omitempty"`
	Replayed    int              `json:"replayed"`
	WouldReplay int              `json:"would_replay"`
	Refused     int              `json:"refused"`
	Refailed    int              `json:"refailed"`
	Resolved    int              `json:"resolved"`
	After       int64            `json:"cursor"`
	Rate        float64          `json:"rate_per_second,omitempty"`
	Error       string           `json:"error,omitempty"`
	Resume      string           `json:"resume,omitempty"`
	Decisions   []replayDecision `json:"decisions"`
}

// noBroker stands in for the publisher of a dry run without --to: a
// dry run never publishes.
type noBroker struct{}

func (noBroker) Publish(string, ...*message.Message) error {
	return errors.New("a dry run publishes nothing")
}
func (noBroker) Close() error { return nil }

type replayFlags struct {
	ff                 filterFlags
	dryRun, force, yes bool
	newKey, asJSON     bool
	rate, resume       string
	target, broker     string
	max, concurrency   int
	abortAfter         int
	defaultRetention   time.Duration
	store, storePrefix string
	storeTable         string
}

func (a *app) replayCmd() *cobra.Command {
	var rf replayFlags
	cmd := &cobra.Command{
		Use:   "replay [ID|SEQ...]",
		Short: "Republish dead letters to their topics, rate limited, resumable",
		Long: `replay republishes the archived dead letters the filters select (the open
ones unless --state says otherwise), or the entries given as arguments
(their IDs, the start of an ID as ls prints it, or SEQ numbers; in any
state), oldest first, to their original topics (or --target) through the
broker of --to: the original payload, UUID and metadata, so the handler finds
its dedup record again (an operation that completed meanwhile is acked as
a duplicate). It gives an exhausted record a fresh attempt budget once.

A replay of every open dead letter (no filter, no IDs) needs --yes, as a
purge does; see first what it would do with --dry-run.

Rails:
  --dry-run      decide every entry and print it; publish, mark and save nothing
  --rate         at most this many messages per second ("500/s", "500", "30/m")
  --max          pause after this many messages (state paused, exit status 0;
                 --resume publishes the next ones)
  --abort-after  stop when this many replayed messages in a row fail again
  retention      an entry older than its dedup retention may have lost its
                 record, and its replay could repeat a completed effect: it is
                 refused unless --force
  --new-key      deliberately give each message a new operation key (a new
                 operation, whatever its record says)

Every run has an ID, printed first. The run's cursor is saved after each
message: Ctrl-C stops it cleanly (in-flight publishes finish), and
--resume RUN_ID continues where it stopped, with the saved filter, target
and key choice, publishing no entry twice.

A progress bar is shown when stdout is a terminal; otherwise one line per
entry.

Brokers (--to or SURELY_BROKER_URL):
  nats://host:4222                      NATS JetStream (the topic's stream must exist)
  amqp://user:pass@host:5672/vhost      RabbitMQ (topic = queue)
  redis://host:6379/0                   Redis Streams (topic = stream)
  kafka://host:9092[,host:9092...]      Kafka (the topic must exist)
  sqs://REGION[?endpoint=URL]           Amazon SQS (topic = queue; AWS_* credentials)
  postgres://user:pass@host:5432/db     PostgreSQL through watermill-sql

--store (optional) lets the run read each operation's record in the
dedup store: the retention guard then uses the record's real expiry (a
record already gone is refused), and replayed messages are confirmed done,
which resets the count of consecutive re-failures.`,
		Example: `  surely dlq replay --topic orders --reason exhausted --dry-run
  surely dlq replay --topic orders --reason exhausted --rate 50/s --to nats://localhost:4222
  surely dlq replay 0b8f1c3e 42 --to nats://localhost:4222
  surely dlq replay --resume 0b8f1c3e-7d2a-4f4b-9c1d-2e3f4a5b6c7d --to nats://localhost:4222`,
		RunE: func(cmd *cobra.Command, args []string) error { return a.runReplay(cmd, &rf, args) },
	}
	rf.ff.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&rf.dryRun, "dry-run", false, "decide and print every entry; publish, mark and save nothing")
	fl.BoolVar(&rf.yes, "yes", false, "replay every open dead letter: needed without a filter, IDs or --dry-run")
	fl.StringVar(&rf.rate, "rate", "50/s", `messages per second: "500/s", "500", "30/m"; "0" for no limit`)
	fl.IntVar(&rf.max, "max", 0, "publish at most this many messages in this call (0: no limit)")
	fl.IntVar(&rf.concurrency, "concurrency", 1, "publishes in flight")
	fl.StringVar(&rf.resume, "resume", "", "continue the interrupted run RUN_ID (its saved filter, target and key choice apply)")
	fl.IntVar(&rf.abortAfter, "abort-after", 10, "stop after this many consecutive re-failures (-1: never)")
	fl.BoolVar(&rf.force, "force", false, "replay entries older than their dedup retention too")
	fl.DurationVar(&rf.defaultRetention, "default-retention", 0, "dedup retention of entries whose envelope has none (0: unknown, refused unless --force)")
	fl.BoolVar(&rf.newKey, "new-key", false, "give each message a new operation key (its old record is ignored)")
	fl.StringVar(&rf.target, "target", "", "republish every message to this topic instead of its original one")
	fl.StringVar(&rf.broker, "to", "", "broker URL to republish to: "+brokerSchemes)
	envFlag(cmd, "to", "SURELY_BROKER_URL")
	// --broker is the flag's former name, kept as a hidden alias.
	fl.StringVar(&rf.broker, "broker", "", "former name of --to")
	_ = fl.MarkHidden("broker")
	fl.StringVar(&rf.store, "store", "", "idempotency store URL: the retention guard reads the records, replayed messages are confirmed done (optional)")
	envFlag(cmd, "store", "SURELY_STORE_URL")
	fl.StringVar(&rf.storePrefix, "store-prefix", "", `key prefix of the Redis store (default "surely:")`)
	envFlag(cmd, "store-prefix", "SURELY_STORE_PREFIX")
	fl.StringVar(&rf.storeTable, "store-table", "", `table of the SQL store (default "surely_inbox")`)
	envFlag(cmd, "store-table", "SURELY_STORE_TABLE")
	fl.BoolVar(&rf.asJSON, "json", false, "print the decisions and the result as JSON")
	return cmd
}

func (a *app) runReplay(cmd *cobra.Command, rf *replayFlags, args []string) error {
	rate, err := rf.check(len(args))
	if err != nil {
		return err
	}
	filter, err := rf.ff.filter(a.now())
	if err != nil {
		return err
	}
	ar, err := a.openArchive(cmd)
	if err != nil {
		return err
	}
	defer ar.close()
	if len(args) > 0 {
		if filter.IDs, err = resolveRefs(cmd.Context(), ar, args); err != nil {
			return err
		}
		if !rf.ff.stateSet() {
			filter.States = nil
		}
	}
	pub, closePub, err := a.replayBroker(rf)
	if err != nil {
		return err
	}
	defer closePub()
	var store idempotency.Store
	if rf.store != "" {
		st, err := a.openStore(cmd)
		if err != nil {
			return err
		}
		defer st.close()
		store = st.Store
	}

	runID := rf.resume
	if runID == "" {
		runID = a.newID()
	}
	out := replayJSON{RunID: runID, DryRun: rf.dryRun, Decisions: []replayDecision{}}
	a.printReplayStart(rf, runID)
	prog := a.newReplayProgress(rf.asJSON, &out)
	ctx := cmd.Context()
	res, err := replayCall(ctx, ar, pub, filter, rf, a.replayOptions(rf, rate, store, prog), runID)
	prog.finish()

	code, err := out.settle(res, err, ctx.Err() != nil)
	if errors.Is(err, dlq.ErrInvalidOption) {
		return withCode(exitUsage, err)
	}
	if rf.asJSON {
		if werr := writeJSON(a.stdout, out); werr != nil {
			return werr
		}
	} else {
		a.printReplaySummary(out, rf)
	}
	switch {
	case code == exitOK:
		return nil
	case err != nil:
		return withCode(code, withStreamHint(err))
	case rf.dryRun:
		return withCode(code, fmt.Errorf("%s would be refused (retention guard): %s", plurals(res.Refused, "entry", "entries"), guardAdvice))
	default:
		return withCode(code, fmt.Errorf("%s refused (retention guard): %s", plurals(res.Refused, "entry", "entries"), guardAdvice))
	}
}

// check checks the flags of a replay given nargs arguments and returns
// its rate.
func (rf *replayFlags) check(nargs int) (float64, error) {
	rate, err := parseRate(rf.rate)
	if err != nil {
		return 0, usageErr("--rate: %w", err)
	}
	switch {
	case rf.max < 0:
		return 0, usageErr("--max %d: must not be negative", rf.max)
	case rf.concurrency < 1 || rf.concurrency > 256:
		return 0, usageErr("--concurrency %d: want 1..256", rf.concurrency)
	case rf.abortAfter == 0 || rf.abortAfter < -1:
		return 0, usageErr("--abort-after %d: want a positive count, or -1 for never", rf.abortAfter)
	case rf.defaultRetention < 0:
		return 0, usageErr("--default-retention %v: must not be negative", rf.defaultRetention)
	}
	if rf.resume == "" {
		if !rf.yes && !rf.dryRun && nargs == 0 && !rf.ff.narrows() {
			return 0, usageErr("a replay of every %s dead letter needs --yes: pass a filter (--topic, --reason, --key, ...) or IDs to replay some, "+
				"--dry-run to see what it would do, or --yes to republish them all", rf.ff.stateWord())
		}
		return rate, nil
	}
	if rf.ff.any() || rf.target != "" || rf.newKey || rf.force || rf.yes || nargs > 0 {
		return 0, usageErr("--resume continues the saved run with its own filter or IDs, --target, --new-key and --force: do not pass them (nor --yes)")
	}
	if err := idem.ValidateKey(rf.resume); err != nil {
		return 0, usageErr("--resume %q: %w", rf.resume, err)
	}
	return rate, nil
}

// replayBroker opens the broker of --to; a dry run without one gets
// noBroker. The returned close closes what was opened (not a test's
// in-process broker).
func (a *app) replayBroker(rf *replayFlags) (message.Publisher, func(), error) {
	if rf.dryRun && rf.broker == "" {
		return noBroker{}, func() {}, nil
	}
	pub, err := a.openBroker(rf.broker)
	if err != nil {
		return nil, nil, err
	}
	if _, test := a.memBrokers[rf.broker]; test {
		return pub, func() {}, nil
	}
	return pub, func() { _ = pub.Close() }, nil
}

// printReplayStart prints the run's first line (not with --json).
func (a *app) printReplayStart(rf *replayFlags, runID string) {
	switch {
	case rf.asJSON:
	case rf.dryRun:
		fprintf(a.stdout, "dry run %s: nothing is published, marked or saved\n", runID)
	case rf.resume != "":
		fprintf(a.stdout, "resuming replay run %s\n", runID)
	default:
		fprintf(a.stdout, "replay run %s\n", runID)
	}
}

// replayOptions are the options of a replay call common to Run and
// Resume. The replay reads the app's time (tests fix it) and sleeps for real.
func (a *app) replayOptions(rf *replayFlags, rate float64, store idempotency.Store, prog *replayProgress) []dlq.Option {
	opts := []dlq.Option{
		replay.WithMax(rf.max), replay.WithDefaultRetention(rf.defaultRetention), replay.WithRate(rate),
		replay.WithConcurrency(rf.concurrency), replay.WithAbortAfter(rf.abortAfter),
		dlq.WithClock(a.now), replay.WithProgress(prog.report),
	}
	if rf.dryRun {
		opts = append(opts, replay.WithDryRun())
	}
	if store != nil {
		opts = append(opts, replay.WithStore(store))
	}
	return opts
}

// replayCall resumes the run of --resume, or starts run runID with the
// filter and the choices of the flags.
func replayCall(ctx context.Context, ar archive.Archive, pub message.Publisher, filter archive.Filter, rf *replayFlags, opts []dlq.Option, runID string) (replay.Summary, error) {
	if rf.resume != "" {
		return replay.Resume(ctx, ar, pub, rf.resume, opts...)
	}
	opts = append(opts, replay.WithID(runID))
	if rf.target != "" {
		opts = append(opts, replay.WithTarget(rf.target))
	}
	if rf.newKey {
		opts = append(opts, replay.WithNewKey(""))
	}
	if rf.force {
		opts = append(opts, replay.WithForce())
	}
	return replay.Run(ctx, ar, pub, filter, opts...)
}

// settle fills out from the call's summary and error and returns the exit
// status: 0 when the run is done or paused at --max, 4 when it aborted
// or refused entries, 130 when Ctrl-C or a cancel stopped it (interrupted:
// the call's context ended), else the error's. An invalid option is
// returned as is, for a usage error.
func (out *replayJSON) settle(res replay.Summary, err error, interrupted bool) (int, error) {
	out.State, out.Replayed, out.WouldReplay = string(res.State), res.Replayed, res.WouldReplay
	out.Refused, out.Refailed, out.After, out.Rate = res.Refused, res.Refailed, res.After, res.Rate
	out.Resolved = res.Resolved
	resume := fmt.Sprintf("surely dlq replay --resume %s (with the same --archive and --to)", out.RunID)
	resumable := res.State == archive.RunPaused || res.State == archive.RunInterrupted
	code := exitOK
	switch {
	case err == nil:
	case errors.Is(err, dlq.ErrInvalidOption):
		return exitUsage, err
	case errors.Is(err, replay.ErrAborted):
		code, resumable = exitRefused, true
	case interrupted, res.State == archive.RunCanceled:
		code, resumable = exitInterrupted, true
	default:
		code = exitCode(err)
	}
	if resumable {
		out.Resume = resume
	}
	if err != nil {
		out.Error = err.Error()
	}
	if code == exitOK && res.Refused > 0 {
		code = exitRefused
	}
	return code, err
}

// guardAdvice says what to do about entries the retention guard refused.
const guardAdvice = "when the store's retention is unknown but covers them, pass --default-retention; " +
	"when their records may be gone, replay them with --force only if the effect is safe to repeat"

func (a *app) printReplaySummary(out replayJSON, rf *replayFlags) {
	w := a.stdout
	if out.DryRun {
		fprintf(w, "dry run: would replay %d, would refuse %d\n", out.WouldReplay, out.Refused)
		return
	}
	fprintf(w, "replayed %d, refused %d, re-failed %d", out.Replayed, out.Refused, out.Refailed)
	if out.Resolved > 0 {
		fprintf(w, ", resolved %d", out.Resolved)
	}
	fprintf(w, "; state %s, cursor %d", orDash(out.State), out.After)
	if out.Rate > 0 {
		fprintf(w, ", %.1f msg/s", out.Rate)
	}
	fprintln(w)
	// A stop's error is not repeated here: the command returns it, and
	// execute prints it on stderr.
	if out.State == string(archive.RunPaused) && out.Error == "" {
		fprintf(w, "paused after --max %d with entries left\n", rf.max)
	}
	if out.Resume != "" {
		fprintf(w, "resume with: %s\n", out.Resume)
	}
}

// replayProgress shows the run: a bar on a terminal, one line per entry
// otherwise, and collects the decisions for --json.
type replayProgress struct {
	a      *app
	asJSON bool
	out    *replayJSON
	tty    bool

	mu  sync.Mutex
	bar *progressbar.ProgressBar
}

func (a *app) newReplayProgress(asJSON bool, out *replayJSON) *replayProgress {
	return &replayProgress{a: a, asJSON: asJSON, out: out, tty: !asJSON && a.isTerminal()}
}

func (p *replayProgress) report(pr replay.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := replayDecision{Seq: pr.Seq, ID: pr.EntryID, Topic: pr.Topic, Action: string(pr.Action), Reason: pr.Reason}
	p.out.Decisions = append(p.out.Decisions, d)
	if p.asJSON {
		return
	}
	if p.tty {
		if p.bar == nil {
			p.bar = progressbar.NewOptions(pr.Total,
				progressbar.OptionSetWriter(p.a.stderr), progressbar.OptionSetDescription("replay"),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		}
		if pr.Action == replay.ActionRefused {
			_ = p.bar.Clear()
			printDecision(p.a.stdout, d)
		}
		_ = p.bar.Set(pr.Done)
		return
	}
	printDecision(p.a.stdout, d)
}

func (p *replayProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
		fprintln(p.a.stderr)
	}
}

func printDecision(w io.Writer, d replayDecision) {
	action := strings.ReplaceAll(d.Action, "_", " ")
	if d.Reason != "" {
		fprintf(w, "%-12s %6d %s -> %s: %s\n", action, d.Seq, d.ID, orDash(d.Topic), d.Reason)
		return
	}
	fprintf(w, "%-12s %6d %s -> %s\n", action, d.Seq, d.ID, orDash(d.Topic))
}
