#!/usr/bin/env bash
# test/hw/cross.sh: a goroce software device and the hardware backend on
# Linux's rxe talk to each other through the same tests (issue 20 item 5).
#
# The verbs test binary, built on this host with cgo and -tags
# goroce_ibverbs, runs twice at once in cross mode (internal/rdmatest's
# CrossRun, GOROCE_TEST_CROSS): on the host, in the network namespace the
# rxe VM is bridged into, where its ends are goroce devices on 10.99.0.1
# (UDP 4791 is free there), and in the VM with GOROCE_TEST_BACKEND=hw:rxe0,
# where its ends are QPs of rxe0 through libibverbs. The two processes run
# the same tests (TestCross*) and meet over TCP (the host listens on
# 10.99.0.1:$CROSS_PORT), exchanging QP numbers, GIDs, keys and "done"
# steps as perftest exchanges its QPs' attributes; the data moves by RDMA
# between the two backends. Each case runs in both directions (goroce
# requester with rxe0 responder, and the reverse): RC SEND, SEND_WITH_IMM,
# WRITE, WRITE_WITH_IMM, READ (one packet and five), CMP_SWAP and
# FETCH_ADD, UD SEND and SEND_WITH_IMM (1 byte and the path MTU), UC
# SEND, SEND_WITH_IMM, WRITE and WRITE_WITH_IMM, RC with a shared receive
# queue (SEND, SEND_WITH_IMM, WRITE_WITH_IMM), and a WRITE with a bad rkey
# (REM_ACCESS_ERR at the requester, both QPs in ERR), the data checked
# byte by byte by the side that holds it.
# Then package cm's test binary runs the same way: its TestCrossCM* connect
# the two processes through the CM, goroce's on the host and the kernel's
# rdma_cm through librdmacm in the VM, with the net-like API (Listen,
# Dial, Accept, private data, a SEND and a WRITE, Close) and with the
# event API (IDs on event channels, SetQP, Accept, a SEND, Disconnect).
#
# Both processes must pass every case, the same cases, none skipped.
#
#   sudo test/hw/cross.sh        # boots the VM; about 2 minutes with its image built
#
# test/hw/run.sh calls it with its VM up (CROSS_VM_UP=1) and its test
# binaries (CROSS_VERBS_TEST, CROSS_CM_TEST). Environment: RXE_VM_DIR (default
# ../shared/rxe-vm beside the repository), RXE_CACHE (~/.cache/rxe-vm),
# RXE_NETNS (rdmatest), CROSS_PORT (18620, TCP).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RXE_VM_DIR=${RXE_VM_DIR:-$(cd "$ROOT/.." && pwd)/shared/rxe-vm}
VM=$RXE_VM_DIR/rxe-vm.sh
NS=${RXE_NETNS:-rdmatest}
HOST_IP=10.99.0.1
VM_IP=10.99.0.2
PORT=${CROSS_PORT:-18620}
CACHE=${RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rxe-vm}
SHARE=$CACHE/vms/vm0/share
OUT=$(mktemp -d /tmp/goroce-cross.XXXXXX)
ok=0
RUN='^TestCross'

log() { printf '[cross %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "$*"; exit 1; }

[ -x "$VM" ] || die "harness not found: $VM (set RXE_VM_DIR)"
VERBS_TEST=${CROSS_VERBS_TEST:-}
CM_TEST=${CROSS_CM_TEST:-}
if [ -z "$VERBS_TEST" ] || [ -z "$CM_TEST" ]; then
	if ! dpkg -s libibverbs-dev librdmacm-dev >/dev/null 2>&1; then
		log "installing libibverbs-dev librdmacm-dev"
		DEBIAN_FRONTEND=noninteractive apt-get install -y libibverbs-dev librdmacm-dev >"$OUT/apt.log" 2>&1 ||
			{ apt-get update >>"$OUT/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y libibverbs-dev librdmacm-dev >>"$OUT/apt.log" 2>&1; } ||
			die "apt-get install libibverbs-dev librdmacm-dev failed (see $OUT/apt.log)"
	fi
	log "building the verbs and cm tests (cgo, -tags goroce_ibverbs)"
	if [ -z "$VERBS_TEST" ]; then
		VERBS_TEST=$OUT/verbs.test
		(cd "$ROOT" && CGO_ENABLED=1 go test -c -tags goroce_ibverbs -o "$VERBS_TEST" ./verbs) || die "build failed"
	fi
	if [ -z "$CM_TEST" ]; then
		CM_TEST=$OUT/cm.test
		(cd "$ROOT" && CGO_ENABLED=1 go test -c -tags goroce_ibverbs -o "$CM_TEST" ./cm) || die "build failed"
	fi
fi

if [ "${CROSS_VM_UP:-0}" != 1 ]; then
	log "building the VM image (idempotent)"
	"$VM" build >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" >&2; die "rxe-vm.sh build failed"; }
	if "$VM" status 2>/dev/null | grep -q ': running'; then
		log "a VM of the harness is running: taking it down first"
		"$VM" down >>"$OUT/down.log" 2>&1
	fi
	# Down before OUT goes (a redirection into a removed OUT would skip
	# the command, and leave the VM up holding the caller's flock: qemu
	# inherits its descriptor).
	trap '"$VM" down >>"$OUT/down.log" 2>&1; [ "$ok" = 1 ] && rm -rf "$OUT"' EXIT
	"$VM" net-up >"$OUT/start.log" 2>&1 || { cat "$OUT/start.log" >&2; die "net-up failed"; }
	"$VM" start vm0 "$VM_IP" >>"$OUT/start.log" 2>&1 || { tail -30 "$OUT/start.log" >&2; die "VM start failed"; }
	log "vm0 ready"
fi

mkdir -p "$SHARE/goroce-cross"
total=0

# cross NAME TEST: runs TEST's TestCross* in both processes; both must
# pass the same cases, none skipped.
cross() {
	local name=$1 test=$2
	cp "$test" "$SHARE/goroce-cross/$name.test"
	log "$name: host: goroce devices on $HOST_IP (netns $NS); vm0: rxe0 through libibverbs and librdmacm"
	ip netns exec "$NS" env GOROCE_TEST_CROSS="listen $HOST_IP:$PORT" \
		"$test" -test.v -test.count=1 -test.timeout=900s -test.run "$RUN" >"$OUT/$name-host.log" 2>&1 &
	local host=$!
	"$VM" exec vm0 --timeout 900 -- \
		"cd /host/goroce-cross && GOROCE_TEST_BACKEND=hw:rxe0 GOROCE_TEST_CROSS='dial $HOST_IP:$PORT' ./$name.test -test.v -test.count=1 -test.timeout=850s -test.run '$RUN'" \
		>"$OUT/$name-vm.log" 2>&1
	local vrc=$?
	wait "$host"
	local hrc=$?
	passed "$OUT/$name-host.log" >"$OUT/$name-host.pass"
	passed "$OUT/$name-vm.log" >"$OUT/$name-vm.pass"
	local n
	n=$(wc -l <"$OUT/$name-host.pass")
	grep -E -- '--- (FAIL|SKIP)' "$OUT/$name-host.log" "$OUT/$name-vm.log" >&2
	if [ $hrc -ne 0 ] || [ $vrc -ne 0 ] || grep -qE -- '--- (FAIL|SKIP)' "$OUT/$name-host.log" "$OUT/$name-vm.log"; then
		tail -40 "$OUT/$name-host.log" >&2
		tail -40 "$OUT/$name-vm.log" >&2
		die "$name FAILED (host rc $hrc, VM rc $vrc; logs $OUT/$name-host.log, $OUT/$name-vm.log)"
	fi
	if [ "$n" -eq 0 ] || ! cmp -s "$OUT/$name-host.pass" "$OUT/$name-vm.pass"; then
		diff "$OUT/$name-host.pass" "$OUT/$name-vm.pass" >&2
		die "$name: the two processes did not pass the same cases (logs $OUT/$name-host.log, $OUT/$name-vm.log)"
	fi
	grep -E -- '--- PASS: .*→' "$OUT/$name-host.log" | sed 's/^ *//' >&2
	log "$name: $n cases passed in both processes"
	total=$((total + n))
}
passed() { grep -E -- '--- PASS: .*→' "$1" | awk '{print $3}' | sort; }
cross verbs "$VERBS_TEST"
cross cm "$CM_TEST"
rm -rf "$SHARE/goroce-cross"
log "goroce (host) ↔ rxe0 through the hardware backend (VM): $total cases passed in both processes, both directions, 0 failed, 0 skipped"
ok=1
[ "${CROSS_VM_UP:-0}" = 1 ] && rm -rf "$OUT"
exit 0
