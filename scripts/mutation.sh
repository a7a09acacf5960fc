#!/usr/bin/env bash
# Mutation testing with gremlins: mutate the code of each package, rerun that
# package's own tests per mutant, and print one line per package with its
# test efficacy (killed / (killed + lived)) and mutant coverage
# ((killed + lived) / (killed + lived + not covered)), both as gremlins
# counts them: a timed-out mutant is listed but in neither figure.
# docs/MUTATION.md explains the figures and every mutant that survives.
#
#   scripts/mutation.sh                     every package of the table
#   scripts/mutation.sh retry middleware    only these (module-relative dirs)
#
# Environment:
#   MUTATION_OUT      directory for the per-package JSON and logs
#                     (default: a new temporary directory, printed at the end)
#   MUTATION_WORKERS  gremlins workers (default 1: a mutant's tests already
#                     use the cores, and parallel runs turn slow tests into
#                     timeouts)
#   MUTATION_TIMEOUT  gremlins --timeout-coefficient: a mutant's test run may
#                     take this many times the unmutated coverage run
#                     (default 20). The mutant's run includes compiling the
#                     package, the coverage run mostly comes from the build
#                     cache: on a busy machine raise this when ordinary
#                     mutants show up as TIMED OUT.
#   MUTATION_MIN_EFFICACY  exit 1 when a package's efficacy is below this
#                     percent (default 0: report only)
#   MUTATION_EXCLUDE  one more file regexp to exclude in every package
#                     (paths relative to the package directory), e.g.
#                     '^(trace|metrics|observe)\.go$' to measure only the
#                     rest of middleware
#   SURELY_*_URL      the servers the redisstore and sqlstore tests use;
#                     defaults are the loopback ones .ci/run uses, and
#                     SURELY_REQUIRE_SERVICES=1 makes a missing server a
#                     failure instead of a skip (a skipped test kills nothing).
#
# Each package is measured on its own: unleash ./DIR mutates the whole
# subtree, so files in subdirectories are excluded (-E '/', the paths are
# relative to DIR). Coverage counts the package's own tests, which are also
# the tests run per mutant, so a mutant only other packages' tests reach is
# NOT COVERED rather than a false LIVED.
#
# internal/record is the state machine memstore and sqlstore run; its own
# tests include the conformance suite run against memstore
# (TestConformanceThroughMemstore), so its mutants are measured against the
# suite that states every answer, as gremlins runs only the mutated
# package's tests.
#
# The server-backed stores are slow per mutant, so they are restricted to
# the files that hold their claim/complete/release/extend protocol (only()
# below lists them; a listed file that no longer exists stops the run), and
# redisstore skips the two tests that start their own Sentinel and Cluster
# topologies (20-30 s each, no state-machine assertion the conformance suite
# does not make); docs/MUTATION.md gives the reasons:
#   idempotency/redisstore  redisstore.go only; GOFLAGS -skip TestSentinel,
#                           TestCluster
#   idempotency/sqlstore    claim.go, lease.go, row.go, statements.go,
#                           prepare.go, store.go, schema.go, purge.go,
#                           inbox_deferred.go (what sqlstore.go and fast.go
#                           held before they were split, and the
#                           one-transaction inbox); not dialect.go,
#                           inbox.go, getrecords.go, list.go, doc.go.
#                           GOFLAGS -skip TestCrash* (child processes
#                           killed with SIGKILL, 5 s each; the conformance
#                           and inbox suites assert the state machine)
#   dlq/replay              GOFLAGS -skip TestReplayThroughNATS (an
#                           embedded NATS server per run, 10 s under load;
#                           the unit tests drive the same Run/Watch code
#                           through a recording publisher)
set -euo pipefail
cd "$(dirname "$0")/.."

GREMLINS=${GREMLINS:-github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0}
workers=${MUTATION_WORKERS:-1}
coefficient=${MUTATION_TIMEOUT:-20}
min_efficacy=${MUTATION_MIN_EFFICACY:-0}
out=${MUTATION_OUT:-$(mktemp -d -t surely-mutation.XXXXXX)}
mkdir -p "$out"

export SURELY_REDIS_URL=${SURELY_REDIS_URL:-redis://127.0.0.1:6379}
export SURELY_POSTGRES_URL=${SURELY_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
export SURELY_MYSQL_URL=${SURELY_MYSQL_URL:-root@tcp(127.0.0.1:3306)/test}
export SURELY_REQUIRE_SERVICES=${SURELY_REQUIRE_SERVICES:-1}

all=(retry idempotency internal/record idempotency/memstore dlq/replay middleware idempotency/redisstore idempotency/sqlstore)
if [ $# -gt 0 ]; then
	pkgs=("$@")
else
	pkgs=("${all[@]}")
fi

# only DIR: the files a restricted package is measured on, one a line
# (none: every file of the package). An include list rather than an
# exclude list, so that a file added to the package or a file split in two
# is not measured, or dropped, without the list saying so; excludes fails
# when a listed file does not exist.
only() {
	case $1 in
	idempotency/redisstore) printf '%s\n' redisstore.go ;;
	idempotency/sqlstore) printf '%s\n' claim.go lease.go row.go statements.go prepare.go store.go schema.go purge.go inbox_deferred.go ;;
	esac
}

# excludes DIR: the -E arguments for one package (regexps on paths relative
# to DIR).
excludes() {
	local args=(-E '/') keep f base
	if [ -n "${MUTATION_EXCLUDE:-}" ]; then
		args+=(-E "$MUTATION_EXCLUDE")
	fi
	mapfile -t keep < <(only "$1")
	if [ ${#keep[@]} -gt 0 ]; then
		for f in "${keep[@]}"; do
			if [ ! -f "$1/$f" ]; then
				echo "mutation: $1/$f is listed in only() but does not exist" >&2
				return 1
			fi
		done
		for f in "$1"/*.go; do
			base=${f##*/}
			case $base in *_test.go) continue ;; esac
			if ! printf '%s\n' "${keep[@]}" | grep -qxF "$base"; then
				args+=(-E "^${base//./\\.}\$")
			fi
		done
	fi
	printf '%s\n' "${args[@]}"
}

# goflags DIR: GOFLAGS for the package's test runs (coverage and mutants).
# -count=1: gremlins times each mutant against the coverage run, and a
# cached coverage run (a second or two) would turn every mutant into a
# timeout. -failfast: a mutant is killed by its first failing test, so the
# rest of the package's tests need not run (a lived mutant still runs all
# of them); the server-backed suites take minutes per mutant without it.
goflags() {
	case $1 in
	idempotency/redisstore) echo '-count=1 -failfast -skip=^(TestSentinel|TestCluster)$' ;;
	idempotency/sqlstore) echo '-count=1 -failfast -skip=^TestCrash' ;;
	dlq/replay) echo '-count=1 -failfast -skip=^TestReplayThroughNATS$' ;;
	*) echo '-count=1 -failfast' ;;
	esac
}

# summarize NAME FILE: one table row from gremlins' JSON. Timed-out and
# not-viable mutants are counted from the per-mutant statuses, which the
# JSON's totals leave out.
summarize() {
	jq -r --arg name "$1" '
		[.files[]?.mutations[]?.status] as $s
		| def n(x): [$s[] | select(. == x)] | length;
		n("KILLED") as $k | n("LIVED") as $l | n("NOT COVERED") as $nc
		| n("TIMED OUT") as $to | n("NOT VIABLE") as $nv
		| ($k + $l + $nc) as $all
		| [$name, $k, $l, $nc, $to, $nv,
		   (if $k + $l > 0 then 100 * $k / ($k + $l) else 0 end),
		   (if $all > 0 then 100 * ($k + $l) / $all else 0 end),
		   (.elapsed_time // 0)]
		| @tsv' "$2" |
		awk -F'\t' '{ printf "%-24s %6d %6d %8d %6d %6d %8.2f %8.2f %7.0f\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
}

header=$(printf '%-24s %6s %6s %8s %6s %6s %8s %8s %7s' package killed lived not-cov t-out n-viab efficacy coverage seconds)
rows=()
failed=0
for pkg in "${pkgs[@]}"; do
	if [ ! -d "$pkg" ]; then
		echo "mutation: no directory $pkg" >&2
		exit 2
	fi
	name=${pkg//\//_}
	if ! ex_text=$(excludes "$pkg"); then
		exit 2
	fi
	mapfile -t ex <<<"$ex_text"
	echo "mutation: $pkg (log: $out/$name.log)" >&2
	if ! GOFLAGS="$(goflags "$pkg")${GOFLAGS:+ $GOFLAGS}" go run "$GREMLINS" unleash --workers "$workers" --timeout-coefficient "$coefficient" \
		"${ex[@]}" -o "$out/$name.json" "./$pkg" >"$out/$name.log" 2>&1; then
		echo "mutation: gremlins failed on $pkg, see $out/$name.log" >&2
		rows+=("$(printf '%-24s gremlins failed, see %s' "$pkg" "$out/$name.log")")
		failed=1
		continue
	fi
	row=$(summarize "$pkg" "$out/$name.json")
	rows+=("$row")
	grep -E '^ *(LIVED|TIMED OUT)' "$out/$name.log" | sed "s|^|  $pkg: |" >&2 || true
	eff=$(awk '{print $(NF-2)}' <<<"$row")
	if awk -v e="$eff" -v m="$min_efficacy" 'BEGIN { exit !(e < m) }'; then
		failed=1
	fi
done

echo
echo "$header"
printf '%s\n' "${rows[@]}"
echo
echo "JSON and logs: $out"
exit $failed
