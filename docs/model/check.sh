#!/bin/sh
# Model-checks docs/model/surely.pml with spin: every property exhaustively,
# in lease mode and in inbox mode, and two runs that must find a violation
# (so the properties are known to bite). Installs nothing: it needs spin and
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

safety="-DSAFETY -DNOCLAIM"
run "lease mode: safety (no loss, fencing, attempts, end states)" ok "" "$safety" "-m1000000"
run "inbox mode: safety (+ never two effects)" ok "-DINBOX" "$safety" "-m1000000"
# Liveness under weak fairness visits about 7 times the states: one crash.
run "lease mode: eventually acked, DONE or dead-lettered (weak fairness, 1 crash)" ok "-DMAX_CRASHES=1" "" "-m1000000 -a -f -N eventually"
run "inbox mode: eventually acked, DONE or dead-lettered (weak fairness, 1 crash)" ok "-DINBOX -DMAX_CRASHES=1" "" "-m1000000 -a -f -N eventually"
run "lease mode allows a second effect" violation "-DEXPECT_DUP" "$safety" "-m1000000"
run "the pre-fix release path dead-letters a stale verdict" violation "-DSTALE_VERDICT" "$safety" "-m1000000"
exit $status
