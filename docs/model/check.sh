#!/bin/sh
# Model-checks docs/model/surely.pml with spin: every property exhaustively,
# in lease mode and in inbox mode, feature by feature, and then mutants of
# the model, each of which must be caught (so the properties are known to
# bite). Installs nothing: it needs spin and
# a C compiler on PATH. Exits non-zero on any unexpected result.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cp "$here/surely.pml" .
status=0

# run NAME EXPECT SPIN_FLAGS CC_FLAGS PAN_FLAGS: EXPECT is ok or violation.
run() {
	name=$1 expect=$2 sflags=$3 cflags=$4 pflags=$5
	spin $sflags -a surely.pml >/dev/null
	# shellcheck disable=SC2086
	gcc -O2 -w $cflags -o pan pan.c
	start=$(date +%s)
	# shellcheck disable=SC2086
	./pan $pflags >out.txt 2>&1 || true
	secs=$(($(date +%s) - start))
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' out.txt)
	states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' out.txt)
	if [ -z "$errors" ]; then
		echo "FAIL  $name: pan did not finish"; cat out.txt; status=1; return
	fi
	case $expect in
	ok) if [ "$errors" -eq 0 ] && ! grep -q "Search not completed" out.txt; then
			echo "ok    $name: $states states, ${secs}s"
		else
			echo "FAIL  $name: $errors error(s)"; grep -E "violated|error|Search not completed" out.txt || true
			[ -f surely.pml.trail ] && spin $sflags -t -p -g surely.pml | tail -60
			status=1
		fi ;;
	violation) if [ "$errors" -gt 0 ]; then
			echo "ok    $name: violation found as expected ($(grep -o 'assertion violated.*' out.txt | head -1))"
		else
			echo "FAIL  $name: the expected violation was not found ($states states)"; status=1
		fi ;;
	esac
	rm -f surely.pml.trail
}

safety="-DSAFETY -DNOCLAIM -DCOLLAPSE"
live="-DCOLLAPSE"
# Each feature is checked exhaustively on its own, with the bounds that keep
# a run within seconds (README.md: "Bounds").
core="-DNO_REPLAY -DNO_CONFLICT -DNO_EXPIRY"
replay="-DNO_CONFLICT -DNO_EXPIRY -DMAX_CRASHES=1 -DMAX_SHUTDOWNS=0"
expiry="-DNO_REPLAY -DNO_CONFLICT -DMAX_CRASHES=0 -DMAX_SHUTDOWNS=0"
all="-DMAX_CRASHES=0 -DMAX_SHUTDOWNS=0 -DMAX_RESENDS=0 -DMAX_DL_FAILS=0"
run "lease mode: safety (2 crashes, shutdown, lost replies)" ok "$core" "$safety" "-m1000000"
run "inbox mode: safety (+ never two effects)" ok "-DINBOX $core" "$safety" "-m1000000"
run "lease mode: replay reopens once per run" ok "$replay" "$safety" "-m1000000"
run "inbox mode: replay reopens once per run" ok "-DINBOX $replay" "$safety" "-m1000000"
run "lease mode: replay and a shutdown's refund" ok "-DNO_CONFLICT -DNO_EXPIRY -DMAX_CRASHES=0" "$safety" "-m1000000"
run "lease mode: retention expiry" ok "$expiry" "$safety" "-m1000000"
run "inbox mode: retention expiry" ok "-DINBOX $expiry" "$safety" "-m1000000"
run "lease mode: conflicting payload" ok "-DNO_REPLAY -DNO_EXPIRY -DMAX_CRASHES=0 -DMAX_SHUTDOWNS=0" "$safety" "-m1000000"
run "lease mode: all features together" ok "$all" "$safety" "-m1000000"
run "inbox mode: all features together" ok "-DINBOX $all" "$safety" "-m1000000"
# Liveness under weak fairness visits about 10 times the states.
run "lease mode: eventually acked, DONE or dead-lettered (weak fairness, 1 crash)" ok "$core -DMAX_CRASHES=1 -DMAX_SHUTDOWNS=0" "$live" "-m1000000 -a -f -N eventually"
run "inbox mode: eventually acked, DONE or dead-lettered (weak fairness, 1 crash)" ok "-DINBOX $core -DMAX_CRASHES=1 -DMAX_SHUTDOWNS=0" "$live" "-m1000000 -a -f -N eventually"
run "lease mode: eventually acked, all features (weak fairness)" ok "$all -DMAX_ATTEMPTS=1" "$live" "-m1000000 -a -f -N eventually"
# The inbox with WithInTxClaims: a first delivery claims, runs the effect
# and marks DONE in one transaction under the row lock; crashes inside it
# roll it all back. POISON: a message that kills the process on every
# attempt.
intx="-DINTX -DMAX_SHUTDOWNS=0"
poison="-DPOISON $core -DMAX_CRASHES=1"
poison0="-DPOISON $core -DMAX_CRASHES=0"
run "one-transaction inbox: safety (2 crashes inside or after the transaction, lost replies)" ok "$intx $core" "$safety" "-m1000000"
run "one-transaction inbox: replay (a committed claim)" ok "$intx -DNO_CONFLICT -DNO_EXPIRY -DMAX_CRASHES=0" "$safety" "-m1000000"
run "one-transaction inbox: conflicting payload" ok "$intx -DNO_REPLAY -DNO_EXPIRY -DMAX_CRASHES=0" "$safety" "-m1000000"
run "inbox mode: a message that kills every attempt, dead-lettered within its budget" ok "-DINBOX $poison" "$safety" "-m1000000"
run "one-transaction inbox: a message that kills every attempt, dead-lettered within its budget + 1" ok "-DINTX $poison" "$safety" "-m1000000"
run "one-transaction inbox: the first delivery's death is not counted (the + 1)" violation "-DINTX $poison -DEXPECT_KILL_BUDGET" "$safety" "-m1000000"
run "one-transaction inbox: a message that kills every attempt is eventually dead-lettered (weak fairness)" ok "-DINTX $poison0" "$live" "-m1000000 -a -f -N eventually"

# Mutants: each breaks one step of the protocol; spin must find a
# counterexample for every one (surely.pml's header names the assertion
# that catches it).
mutant() {
	name=$1 flags=$2
	before=$status
	run "$name" violation "$flags" "$safety" "-m1000000" >out.line
	if [ "$status" -eq "$before" ]; then
		echo "detected  mutant $name ($(sed -n 's/.*(\(assertion violated.*\)))$/\1/p' out.line))"
	else
		cat out.line
	fi
}
mutant "(a) Complete without fencing" "$core -DMUTANT_COMPLETE_UNFENCED"
mutant "(b) Release without fencing" "$core -DMUTANT_RELEASE_UNFENCED"
mutant "(c) Extend without fencing" "$core -DMUTANT_EXTEND_UNFENCED"
mutant "(d) takeover without counting an attempt" "$core -DMUTANT_TAKEOVER_NO_COUNT"
mutant "(e) Complete retried with a new request id" "$core -DMUTANT_COMPLETE_NEW_ID"
mutant "shutdown's permanent error dead-lettered" "$core -DMUTANT_SHUTDOWN_DEADLETTERS"
mutant "handler's final error leaves the record FAILED" "$core -DMUTANT_FINAL_NOT_RECORDED"
mutant "pre-fix release path dead-letters a stale verdict" "$core -DSTALE_VERDICT"
mutant "lease mode allows a second effect (documented)" "$core -DEXPECT_DUP"
mutant "one transaction: DONE committed after the effect's transaction" "$intx $core -DMUTANT_INTX_DONE_OUTSIDE"
mutant "one transaction: the attempt count not persisted (every delivery in one transaction)" "-DINTX $poison -DMUTANT_INTX_UNCOUNTED"
mutant "one transaction: acked before COMMIT" "$intx $core -DMUTANT_INTX_ACK_BEFORE_COMMIT"
exit $status
