#!/bin/bash
# test/libgoroce/run.sh: unmodified, dynamically linked libibverbs programs
# (Debian's ibverbs-utils, perftest, a C harness and rdma-core's own test
# suite) run on goroce devices through goroce-exec, on a machine with no RDMA
# kernel support. For CI: no
# stdin, every program under a timeout, one PASS/FAIL line each, exit status 1
# if any failed.
#
#   test/libgoroce/run.sh            # installs the Debian packages (needs root)
#   GOROCE_NO_APT=1 test/libgoroce/run.sh   # packages already there: no root needed
#
# GOROCE_TEST_PORT picks the devices' UDP port (default 4791; another keeps
# clear of other RoCE software on the machine), GOROCE_TEST_QUICK=1 skips the
# -a sweeps. Everything runs on loopback (127.0.0.1 = goroce0, 127.0.0.2 =
# goroce1). The daemon's log is printed when something failed.
set -u
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$HOME/go/bin:$PATH

if [ "${GOROCE_NO_APT:-0}" != 1 ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq && apt-get install -y -qq gcc libibverbs-dev librdmacm-dev ibverbs-utils \
		perftest rdmacm-utils ibverbs-providers strace python3-pyverbs >/dev/null ||
		{ echo "FAIL apt-get install (run as root, or set GOROCE_NO_APT=1)"; exit 1; }
fi

work=$(mktemp -d)
nicpid=
cleanup() {
	[ -n "$nicpid" ] && kill "$nicpid" 2>/dev/null && wait "$nicpid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

fails=0
last=$SECONDS
# Each line tells how long its check took.
pass() {
	echo "PASS $1 ($((SECONDS - last)) s)"
	last=$SECONDS
}
fail() {
	echo "FAIL $1 ($((SECONDS - last)) s)"
	last=$SECONDS
	fails=$((fails + 1))
	[ -n "${2:-}" ] && tail -15 "$2" | sed 's/^/    /'
	# The server's side of a pair.
	[ -n "${2:-}" ] && [ -f "${2%.out}.srv" ] && echo "    -- server:" && tail -8 "${2%.out}.srv" | sed 's/^/    /'
	return 0
}

go build -o "$work/goroce-exec" ./cmd/goroce-exec || { echo "FAIL go build"; exit 1; }
gcc -O1 -g -Wall -Werror -o "$work/harness" test/libgoroce/harness.c -libverbs -lpthread ||
	{ echo "FAIL harness build"; exit 1; }
gcc -O1 -g -Wall -Werror -o "$work/cmharness" test/libgoroce/cmharness.c -lrdmacm -libverbs ||
	{ echo "FAIL cmharness build"; exit 1; }
gx="$work/goroce-exec"

# A daemon of our own, on a socket of our own.
port=${GOROCE_TEST_PORT:-4791}
export GOROCE_NIC_SOCKET="@goroce-nic-ci-$$"
export GOROCE_LIB="$work/libgoroce.so"
make -s -C libgoroce OUT="$GOROCE_LIB" || { echo "FAIL libgoroce.so build"; exit 1; }
"$gx" --daemon --bind 127.0.0.1,127.0.0.2 --port "$port" --idle-exit 0 >"$work/nic.log" 2>&1 &
nicpid=$!
for _ in $(seq 100); do
	grep -q "listening on" "$work/nic.log" && break
	kill -0 "$nicpid" 2>/dev/null || break
	sleep 0.1
done
grep -q "listening on" "$work/nic.log" || { echo "FAIL daemon start"; cat "$work/nic.log"; exit 1; }

# one NAME TIMEOUT CMD...: a single program; output kept in $work/NAME.out.
one() {
	local name=$1 t=$2
	shift 2
	timeout -k 5 "$t" "$gx" "$@" >"$work/$name.out" 2>&1 </dev/null
}

# pair NAME TCPPORT SERVER_CMD... -- CLIENT_CMD...: a server and a client
# that meet on TCPPORT (their out-of-band exchange, also over loopback).
pair() {
	local name=$1 tport=$2
	shift 2
	local server=() client=()
	while [ "$1" != -- ]; do server+=("$1"); shift; done
	shift
	client=("$@")
	timeout -k 5 120 "$gx" "${server[@]}" >"$work/$name.srv" 2>&1 </dev/null &
	local spid=$!
	for _ in $(seq 200); do
		ss -Htln "sport = :$tport" 2>/dev/null | grep -q . && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.05
	done
	timeout -k 5 120 "$gx" "${client[@]}" >"$work/$name.out" 2>&1 </dev/null
	local c=$?
	wait "$spid"
	local s=$?
	echo "(client exit $c, server exit $s)" >>"$work/$name.out"
	[ $c = 0 ] && [ $s = 0 ]
}

# Discovery and attributes.
if one ibv_devices 30 ibv_devices && grep -q goroce0 "$work/ibv_devices.out" &&
	grep -q goroce1 "$work/ibv_devices.out"; then pass ibv_devices; else fail ibv_devices "$work/ibv_devices.out"; fi
if one devinfo 30 ibv_devinfo -v && grep -q "state:.*PORT_ACTIVE" "$work/devinfo.out" &&
	grep -q "GID\[  1\]:.*::ffff:127.0.0.1, RoCE v2" "$work/devinfo.out" &&
	grep -q "active_mtu:.*4096" "$work/devinfo.out"; then pass "ibv_devinfo -v"; else fail "ibv_devinfo -v" "$work/devinfo.out"; fi

# Nothing reaches for kernel RDMA: no /dev/infiniband, no sysfs, no NETLINK_RDMA.
if command -v strace >/dev/null; then
	if one strace 30 strace -f -e trace=open,openat,stat,newfstatat,access,socket ibv_devinfo -v &&
		! grep -E "/dev/infiniband|/sys/class/infiniband|NETLINK_RDMA" "$work/strace.out" >/dev/null; then
		pass "strace: no kernel RDMA access"
	else fail "strace: no kernel RDMA access" "$work/strace.out"; fi
fi
# Every verb ibv_devinfo imports binds to libgoroce.so, versions included.
if LD_DEBUG=bindings one bindings 30 ibv_devinfo && grep "binding file ibv_devinfo" "$work/bindings.out" | grep "symbol \`ibv_" >"$work/b" &&
	! grep -v "$GOROCE_LIB" "$work/b" >/dev/null; then
	pass "LD_DEBUG=bindings: ibv_devinfo's verbs bind to libgoroce.so"
else fail "LD_DEBUG=bindings" "$work/bindings.out"; fi

# rdma-core's examples, goroce0 serving, goroce1 connecting.
tp=18515
for t in rc uc ud srq; do
	tp=$((tp + 1))
	if pair "ibv_${t}_pingpong" $tp ibv_${t}_pingpong -d goroce0 -g 1 -p $tp -n 500 -- \
		ibv_${t}_pingpong -d goroce1 -g 1 -p $tp -n 500 127.0.0.1 &&
		grep -q "iters in" "$work/ibv_${t}_pingpong.out"; then
		pass "ibv_${t}_pingpong"
	else fail "ibv_${t}_pingpong" "$work/ibv_${t}_pingpong.out"; fi
done
tp=$((tp + 1))
if pair ibv_rc_pingpong_events $tp ibv_rc_pingpong -d goroce0 -g 1 -p $tp -e -- \
	ibv_rc_pingpong -d goroce1 -g 1 -p $tp -e 127.0.0.1; then pass "ibv_rc_pingpong -e"
else fail "ibv_rc_pingpong -e" "$work/ibv_rc_pingpong_events.out"; fi

# perftest, RC, GID index 1. perftest calibrates its clock against
# gettimeofday and gives up ("Correlation coefficient r^2 < 0.9") when the
# machine is too loaded to sample it evenly: that run, and only that kind of
# failure, is repeated once, and said so.
perf() {
	local label="$*"
	tp=$((tp + 1))
	local name="perf$tp"
	local tool=$1
	shift
	local ok=0 try
	for try in 1 2; do
		if pair "$name" $tp "$tool" -d goroce0 -x 1 -p $tp "$@" -- "$tool" -d goroce1 -x 1 -p $tp "$@" 127.0.0.1 &&
			grep -q "^ *[0-9]" "$work/$name.out" && ! grep -qi "error\|failed\|unable" "$work/$name.out"; then
			ok=1
			break
		fi
		grep -q "Correlation coefficient" "$work/$name.out" "$work/$name.srv" || break
		echo "     (perftest could not calibrate its clock on this loaded machine: once more)"
		tp=$((tp + 1))
	done
	if [ $ok = 1 ]; then
		pass "$label"
		grep -A1 "#bytes" "$work/$name.out" | tail -1 | sed 's/^/    /'
	else fail "$label" "$work/$name.out"; fi
}
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do perf $t -n 2000; done
for t in ib_write_lat ib_read_lat ib_send_lat; do perf $t -n 1000; done
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do perf $t -q 4 -n 1000; done
# Completion events (-e): ib_send_lat waits for its send and its receive
# completions on one channel and takes every event for the CQ it expects,
# so the ACK of each message must leave before the event of its receive
# wakes the peer (verbs.CompletionNotifier).
perf ib_send_lat -e -n 1000
perf ib_send_bw -e -n 2000
if [ "${GOROCE_TEST_QUICK:-0}" != 1 ]; then
	for t in ib_write_bw ib_read_bw ib_send_bw; do perf $t -a -n 100; done
	for t in ib_write_lat ib_read_lat ib_send_lat; do perf $t -a -n 100; done
fi

# librdmacm: rdma_cm programs on both sides, goroce0 (127.0.0.1) serving and
# the client on goroce1 (127.0.0.2) where the program can bind its source.
# cmpair NAME SERVER_CMD... -- CLIENT_CMD...: the client starts once the
# server listens (libgoroce says so with GOROCE_DEBUG=1).
cmpair() {
	local name=$1
	shift
	local server=() client=()
	while [ "$1" != -- ]; do server+=("$1"); shift; done
	shift
	client=("$@")
	: >"$work/$name.srv"
	GOROCE_DEBUG=1 timeout -k 5 120 "$gx" "${server[@]}" >"$work/$name.srv" 2>&1 </dev/null &
	local spid=$!
	for _ in $(seq 400); do
		grep -q "libgoroce: rdma_listen on port" "$work/$name.srv" && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.05
	done
	timeout -k 5 120 "$gx" "${client[@]}" >"$work/$name.out" 2>&1 </dev/null
	local c=$?
	wait "$spid"
	local s=$?
	echo "(client exit $c, server exit $s)" >>"$work/$name.out"
	[ $c = 0 ] && [ $s = 0 ]
}
cmp=7470
cm() {
	local label=$1 check=$2
	shift 2
	cmp=$((cmp + 1))
	local name="cm$cmp"
	# shellcheck disable=SC2046
	if cmpair "$name" $(echo "$@" | sed "s/PORT/$cmp/g") && grep -q -- "$check" "$work/$name.out"; then
		pass "$label"
	else fail "$label" "$work/$name.out"; fi
}
cm "rping -C 10" "" rping -s -a 127.0.0.1 -p PORT -C 10 -- rping -c -a 127.0.0.1 -I 127.0.0.2 -p PORT -C 10
for size in 32 4096 65000; do
	cm "rping -S $size -V" "" rping -s -a 127.0.0.1 -p PORT -C 20 -S $size -V -- \
		rping -c -a 127.0.0.1 -I 127.0.0.2 -p PORT -C 20 -S $size -V
done
cm "rping -v (data)" "ping data: rdma-ping-4" rping -s -a 127.0.0.1 -p PORT -C 5 -- \
	rping -c -a 127.0.0.1 -I 127.0.0.2 -p PORT -C 5 -v
cm "ucmatose, 8 connections" "return status 0" ucmatose -b 127.0.0.1 -p PORT -c 8 -C 20 -- \
	ucmatose -s 127.0.0.1 -b 127.0.0.2 -p PORT -c 8 -C 20
cm "ucmatose -m (rdma_migrate_id), -t 32 (TOS)" "return status 0" ucmatose -b 127.0.0.1 -p PORT -c 2 -C 10 -m -- \
	ucmatose -s 127.0.0.1 -b 127.0.0.2 -p PORT -c 2 -C 10 -m -t 32
# udaddy's -p is the port space; it serves on 7174.
cm "udaddy (UD, SIDR), 4 ids" "return status 0" udaddy -b 127.0.0.1 -c 4 -C 10 -- \
	udaddy -s 127.0.0.1 -b 127.0.0.2 -c 4 -C 10
cm "rdma_server/rdma_client" "rdma_client: end 0" rdma_server -s 127.0.0.1 -p PORT -- \
	rdma_client -s 127.0.0.1 -p PORT
# perftest -R: the client's device is the one rdma_cm resolves 127.0.0.1 from
# (goroce0; perftest ignores -d there). Debian's perftest (4.5-0.17) connects
# twice, and its client may send the second REQ before the server listens
# again: the REQ is refused (REJ "invalid service ID", reason 8, as the
# kernel's CM refuses it). Newer perftest retries that connection itself;
# here that run, and only that kind of failure, is repeated once, and said so.
for t in ib_write_bw ib_read_bw ib_send_bw ib_write_lat; do
	for try in 1 2; do
		cmp=$((cmp + 1))
		if cmpair "cm$cmp" $t -d goroce0 -x 1 -R -p $cmp -n 1000 -- \
			$t -d goroce1 -x 1 -R -p $cmp -n 1000 127.0.0.1 && grep -q "^ *[0-9]" "$work/cm$cmp.out"; then
			pass "$t -R"
			grep -A1 "#bytes" "$work/cm$cmp.out" | tail -1 | sed 's/^/    /'
			break
		fi
		if [ $try = 1 ] && grep -q "RDMA_CM_EVENT_REJECTED; error: 8" "$work/cm$cmp.out"; then
			echo "     (perftest's client connected before its server listened again: once more)"
			continue
		fi
		fail "$t -R" "$work/cm$cmp.out"
		break
	done
done
# librdmacm's errors, private data, rejection, a non-blocking channel, fork,
# a channel destroyed under a blocked reader.
for m in errors connect fork orphan; do
	cmp=$((cmp + 2))
	if one "cmharness-$m" 60 "$work/cmharness" $m $cmp && grep -q "$m: ok" "$work/cmharness-$m.out"; then
		pass "cmharness $m"
	else fail "cmharness $m" "$work/cmharness-$m.out"; fi
done

# The C harness: traffic from threads, fork, two processes on one device, errno,
# writes of other threads while a buffer is registered and deregistered.
for m in "loop goroce0 goroce1 4" "fork goroce0 goroce1" "twoproc goroce0" "errors goroce1" \
	"freed goroce0 goroce1" "memrace goroce0 3000"; do
	name="harness-${m// /-}"
	# shellcheck disable=SC2086
	if one "$name" 120 "$work/harness" $m; then pass "harness $m"; else fail "harness $m" "$work/$name.out"; fi
done

# A daemon killed under a program: IBV_EVENT_DEVICE_FATAL and errors, no
# hang (a daemon of its own, on its own socket and port).
(
	export GOROCE_NIC_SOCKET="@goroce-nic-ci-fatal-$$"
	"$gx" --daemon --bind 127.0.0.1 --port $((port + 4)) --idle-exit 0 >"$work/fatal-nic.log" 2>&1 &
	dpid=$!
	for _ in $(seq 100); do grep -q "listening on" "$work/fatal-nic.log" && break; sleep 0.1; done
	mkfifo "$work/fatal.in"
	exec 3<>"$work/fatal.in"
	timeout -k 5 60 "$gx" --bind 127.0.0.1 --port $((port + 4)) "$work/harness" fatal goroce0 <&3 >"$work/fatal.out" 2>&1 &
	hpid=$!
	for _ in $(seq 200); do grep -q "fatal: ready" "$work/fatal.out" && break; sleep 0.05; done
	kill -9 $dpid
	echo go >&3
	wait $hpid
) && grep -q "fatal: ok" "$work/fatal.out" && pass "harness fatal (daemon killed)" ||
	fail "harness fatal (daemon killed)" "$work/fatal.out"

# rdma-core's own test suite (pyverbs): every test it runs passes or skips,
# and every one that passes on Linux rxe passes here (rdma-core-tests/).
if GOROCE_NO_APT=1 GOROCE_EXEC="$gx" GOROCE_TEST_PORT=$((port + 2)) \
	test/libgoroce/rdma-core-tests/run.sh >"$work/rdmacore.out" 2>&1; then
	pass "rdma-core tests"
	grep "^goroce:\|^rxe:" "$work/rdmacore.out" | sed 's/^/    /'
else fail "rdma-core tests" "$work/rdmacore.out"; fi

echo "----"
if [ $fails -gt 0 ]; then
	echo "$fails FAILED; the daemon's log:"
	tail -30 "$work/nic.log"
	exit 1
fi
echo "all passed"
