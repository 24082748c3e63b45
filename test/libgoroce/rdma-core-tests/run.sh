#!/bin/bash
# test/libgoroce/rdma-core-tests/run.sh: rdma-core's own test suite (the
# pyverbs tests Debian's python3-pyverbs ships under
# /usr/share/doc/rdma-core/tests) on goroce0 through goroce-exec, with GID
# index 1 as its run against Linux rxe (rxe.txt, ../../shared/rxe-vm).
#
#   test/libgoroce/rdma-core-tests/run.sh            # check: exit 1 if a test fails or
#                                                    # errors, or one rxe passes does not pass
#   test/libgoroce/rdma-core-tests/run.sh --update   # also rewrite goroce.txt
#
# Installs python3-pyverbs and ibverbs-providers (tests/__init__.py imports the
# mlx5 and EFA modules) unless GOROCE_NO_APT=1. As root, it lends the kernel 16
# huge pages for the run when none are reserved (the huge page tests skip
# otherwise) and gives them back. GOROCE_EXEC and GOROCE_LIB name a goroce-exec
# and libgoroce.so to use (default: built here); GOROCE_TEST_PORT the devices'
# UDP port (default 24793). Loopback only. About 20 s.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
export PATH=/usr/local/go/bin:$HOME/go/bin:$PATH
update=0
[ "${1:-}" = --update ] && update=1

if [ "${GOROCE_NO_APT:-0}" != 1 ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq python3-pyverbs ibverbs-providers >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq python3-pyverbs ibverbs-providers >/dev/null; } ||
		{ echo "FAIL apt-get install python3-pyverbs (run as root, or set GOROCE_NO_APT=1)"; exit 1; }
fi
[ -d /usr/share/doc/rdma-core/tests ] || { echo "FAIL python3-pyverbs' tests are not installed"; exit 1; }

work=$(mktemp -d)
nicpid=
huge_before=
cleanup() {
	[ -n "$nicpid" ] && kill "$nicpid" 2>/dev/null && wait "$nicpid" 2>/dev/null
	[ -n "$huge_before" ] && echo "$huge_before" >/proc/sys/vm/nr_hugepages
	rm -rf "$work"
}
trap cleanup EXIT

gx=${GOROCE_EXEC:-}
if [ -z "$gx" ]; then
	go build -o "$work/goroce-exec" ./cmd/goroce-exec || { echo "FAIL go build"; exit 1; }
	gx=$work/goroce-exec
fi
if [ -z "${GOROCE_LIB:-}" ]; then
	export GOROCE_LIB=$work/libgoroce.so
	make -s -C libgoroce OUT="$GOROCE_LIB" || { echo "FAIL libgoroce.so build"; exit 1; }
fi

# The suite, unpacked (Debian gzips the larger modules).
cp -r /usr/share/doc/rdma-core/tests "$work/tests"
gunzip -f "$work"/tests/*.gz

hp=/proc/sys/vm/nr_hugepages
if [ "$(id -u)" = 0 ] && [ -w $hp ] && [ "$(cat $hp)" = 0 ]; then
	huge_before=0
	echo 16 >$hp
fi

port=${GOROCE_TEST_PORT:-24793}
export GOROCE_NIC_SOCKET="@goroce-nic-rdmacore-$$"
"$gx" --daemon --bind 127.0.0.1,127.0.0.2 --port "$port" --idle-exit 0 >"$work/nic.log" 2>&1 &
nicpid=$!
for _ in $(seq 100); do
	grep -q "listening on" "$work/nic.log" && break
	kill -0 "$nicpid" 2>/dev/null || break
	sleep 0.1
done
grep -q "listening on" "$work/nic.log" || { echo "FAIL daemon start"; cat "$work/nic.log"; exit 1; }

# Debian's pyverbs is for the system's python3, whatever else PATH offers.
(cd "$work" && timeout -k 5 600 "$gx" --port "$port" /usr/bin/python3 tests/run_tests.py \
	--dev goroce0 --gid 1 -v) >"$work/out.txt" 2>&1
/usr/bin/python3 "$here/results.py" <"$work/out.txt" >"$work/goroce.txt"
if ! grep -q "^Ran [0-9]* tests" "$work/out.txt"; then
	echo "FAIL the suite did not finish:"
	tail -30 "$work/out.txt"
	exit 1
fi
[ $update = 1 ] && cp "$work/goroce.txt" "$here/goroce.txt"

bad=0
if grep -E "^[^#].* (FAIL|ERROR)$" "$work/goroce.txt"; then
	bad=1
	sed -n '/^=====/,$p' "$work/out.txt" | tail -60
fi
# Every test that passes on rxe passes here.
while read -r name st _; do
	[ "$st" = ok ] || continue
	grep -q "^$name ok$" "$work/goroce.txt" || { echo "not ok here, ok on rxe: $name"; bad=1; }
done <"$here/rxe.txt"
echo "goroce: $(tail -1 "$work/goroce.txt" | sed 's/^# //')"
echo "rxe:    $(tail -1 "$here/rxe.txt" | sed 's/^# //')"
if [ $bad = 1 ]; then
	echo "FAIL rdma-core tests; the daemon's log:"
	tail -20 "$work/nic.log"
	exit 1
fi
echo "PASS rdma-core tests"
