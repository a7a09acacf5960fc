package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency"
)

// Exit codes of the command.
const (
	exitOK       = 0 // success
	exitError    = 1 // any other failure: a server unreachable, a bad record
	exitUsage    = 2 // bad flags or arguments, or an invalid URL
	exitNotFound = 3 // the dead letter, operation record or replay run does not exist
	exitRefused  = 4 // a safety rail stopped: replay aborted or refused entries, purge without --yes
)

const exitCodesHelp = `Exit status:
  0    success
  1    error (a server cannot be reached, a record cannot be read, ...)
  2    usage: unknown command or flag, bad argument, invalid URL
  3    not found: no such dead letter, operation record or replay run
  4    refused: a replay aborted (replayed messages kept failing) or refused
       entries (retention guard), or purge ran without --yes
  5    migrate status: a schema is missing or not up to date
  130  replay interrupted (Ctrl-C, or surely dlq runs cancel): its cursor is
       saved, continue it with surely dlq replay --resume RUN_ID`

// exitError carries an exit code with its error.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &codeError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codeError{code: code, err: err}
}

// exitCode maps an error to the command's exit status.
func exitCode(err error) int {
	var ce *codeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, archive.ErrNotFound), errors.Is(err, idempotency.ErrNotFound):
		return exitNotFound
	}
	return exitError
}

// app holds what the commands share: their output, environment, clock and
// ID source, and the openers of the backends (tests replace them).
type app struct {
	stdout, stderr io.Writer
	env            func(string) string
	now            func() time.Time
	newID          func() string
	// isTerminal reports whether stdout is a terminal (progress bar).
	isTerminal func() bool
	// started is set once a command's own code runs: an error before that
	// is a usage error (unknown command, bad flag, wrong arguments).
	started bool
	// Backends that tests registered, by the name after "mem:" (archives,
	// stores) or by their full URL (brokers).
	memArchives map[string]archive.Archive
	memStores   map[string]idempotency.Store
	memBrokers  map[string]message.Publisher
	// secrets are the passwords of the URLs the command was given: an
	// error printed by execute has them replaced, whatever quoted them
	// (a driver's error, a parser's).
	secrets []string
}

// secretsOf registers the passwords of the URL raw, for execute to hide.
func (a *app) secretsOf(raw string) {
	a.secrets = append(a.secrets, endpoint.Passwords(raw)...)
}

// redact replaces every registered password in text.
func (a *app) redact(text string) string {
	for _, s := range a.secrets {
		text = strings.ReplaceAll(text, s, "xxxxx")
	}
	return text
}

func newApp(stdout, stderr io.Writer, env func(string) string) *app {
	if env == nil {
		env = func(string) string { return "" }
	}
	return &app{
		stdout:     &stickyWriter{w: stdout},
		stderr:     &stickyWriter{w: stderr},
		env:        env,
		now:        time.Now,
		newID:      func() string { return uuid.NewString() },
		isTerminal: func() bool { return isTerminal(stdout) },
	}
}

// newRootCmd returns the surely command tree writing to stdout and stderr,
// reading SURELY_* settings through env.
func newRootCmd(stdout, stderr io.Writer, env func(string) string) *cobra.Command {
	return newApp(stdout, stderr, env).rootCmd()
}

// execute runs the command line args and returns the exit status. Errors
// are printed to stderr as "surely: <error>".
func execute(ctx context.Context, a *app, args []string) int {
	root := a.rootCmd()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	err = withSchemaHint(cmd, err)
	if sw, ok := a.stdout.(*stickyWriter); ok && sw.err != nil && err == nil {
		err = fmt.Errorf("writing the output: %w", sw.err)
	}
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if !a.started && code == exitError {
		code = exitUsage
	}
	fprintf(a.stderr, "surely: %s\n", a.redact(err.Error()))
	if code == exitUsage {
		fprintln(a.stderr, `Run "surely --help" for usage.`)
	}
	return code
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "surely",
		Short: "Operate surely's dead letters and dedup records",
		Long: `surely lists, shows, replays and purges archived dead letters, shows the
dedup store's record of one operation (its attempt ledger and trace IDs) or
lists its records by state, and creates or updates the SQL schemas.

  surely dlq stats                    count open dead letters by reason, topic, handler, error type
  surely dlq ls [filters]             list them, a page at a time
  surely dlq show ID|SEQ              one dead letter decoded, with its attempt history
  surely dlq replay [filters|ID...]   republish them, rate limited, resumable (--dry-run first)
  surely dlq runs [show|cancel RUN]   the replay runs, what became of their entries
  surely dlq purge [filters|ID...]    discard them, with a reason (--why, --yes)
  surely inspect KEY [--namespace NS] the dedup record of one operation and its attempt ledger
  surely ops ls [--state S]           list the dedup store's records by namespace, state and age
  surely migrate status|up            create or update the SQL schema of a store, archive, outbox
  surely console                      a web page over the archive (loopback unless authenticated)
  surely completion bash|zsh|fish     a shell completion script

A dead letter is open until a replay republishes it (replayed), then
resolved once its operation completed, or failed again (its new dead
letter is open); purge discards it (a tombstone). --state selects others.

Every setting can come from a flag or from a SURELY_* environment variable;
the flag wins. Read commands print JSON with --json.

` + exitCodesHelp,
		Version:       buildVersion(),
		SilenceErrors: true,
		SilenceUsage:  true,
		// "surely completion bash|zsh|fish|powershell" prints a script.
		SuggestionsMinimumDistance: 2,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.applyEnv(cmd); err != nil {
				return err
			}
			a.started = true
			return nil
		},
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &codeError{code: exitUsage, err: err}
	})
	root.AddCommand(a.dlqCmd(), a.inspectCmd(), a.opsCmd(), a.migrateCmd(), a.consoleCmd())
	return root
}

// envAnnotation names the environment variable of a flag.
const envAnnotation = "surely_env"

// envFlag marks flag name of cmd as settable by the environment variable
// env, and says so in its usage.
func envFlag(cmd *cobra.Command, name, env string) {
	f := cmd.Flags().Lookup(name)
	if f == nil {
		f = cmd.PersistentFlags().Lookup(name)
	}
	f.Usage += " (env " + env + ")"
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[envAnnotation] = []string{env}
}

// applyEnv sets every flag that was not given on the command line from its
// environment variable, when that is set.
func (a *app) applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		names := f.Annotations[envAnnotation]
		if err != nil || f.Changed || len(names) == 0 {
			return
		}
		v := a.env(names[0])
		if v == "" {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = usageErr("%s=%q: %w", names[0], v, e)
			return
		}
		f.Changed = true
	})
	return err
}

func (a *app) dlqCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay and discard archived dead letters",
		Long: `The dlq commands work on a dead-letter archive (archive.Archive), chosen by
--archive or SURELY_ARCHIVE_URL:

  redis://[user:pass@]host:6379/0?prefix=surely:dlq   Redis (prefix: the archive's key prefix)
  postgres://user@host:5432/db?prefix=surely_dlq      PostgreSQL (prefix: of the table names)
  mysql://user:pass@host:3306/db?prefix=...          MySQL or MariaDB (mariadb:// too; or the
                                                      driver's DSN: user:pass@tcp(host:3306)/db)
  sqlite:/path/to/dlq.db?prefix=surely_dlq            SQLite (also a bare file path)

The prefix parameter is needed only when the application set one.

A typical session, from an alert to a safe replay:

  surely dlq stats
  surely dlq ls --reason exhausted --topic orders
  surely dlq show ID
  surely dlq replay --topic orders --dry-run
  surely dlq replay --topic orders --rate 50/s
  surely dlq runs show RUN --store URL     # once the consumer processed them
  surely dlq stats --state resolved`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().String("archive", "", "dead-letter archive URL: redis://, postgres://, mysql://, sqlite:PATH")
	envFlag(cmd, "archive", "SURELY_ARCHIVE_URL")
	cmd.AddCommand(a.statsCmd(), a.lsCmd(), a.showCmd(), a.replayCmd(), a.runsCmd(), a.purgeCmd())
	return cmd
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 && cmd.HasAvailableSubCommands() {
		return unknownSubcommand(cmd, args[0])
	}
	if len(args) > 0 {
		return usageErr("%s takes no arguments, got %q", cmd.CommandPath(), strings.Join(args, " "))
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr("%s needs %s", cmd.CommandPath(), what)
		}
		return nil
	}
}
