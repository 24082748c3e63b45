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
# FETCH_ADD, UD SEND and SEND_WITH_IMM (1 byte and the path MTU), and a
# WRITE with a bad rkey (REM_ACCESS_ERR at the requester, both QPs in
# ERR), the data checked byte by byte by the side that holds it.
#
# Both processes must pass every case, the same cases, none skipped.
#
#   sudo test/hw/cross.sh        # boots the VM; about 2 minutes with its image built
#
# test/hw/run.sh calls it with its VM up (CROSS_VM_UP=1) and its test
# binary (CROSS_VERBS_TEST). Environment: RXE_VM_DIR (default
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
TEST=${CROSS_VERBS_TEST:-}
if [ -z "$TEST" ]; then
	if ! dpkg -s libibverbs-dev >/dev/null 2>&1; then
		log "installing libibverbs-dev"
		DEBIAN_FRONTEND=noninteractive apt-get install -y libibverbs-dev >"$OUT/apt.log" 2>&1 ||
			{ apt-get update >>"$OUT/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y libibverbs-dev >>"$OUT/apt.log" 2>&1; } ||
			die "apt-get install libibverbs-dev failed (see $OUT/apt.log)"
	fi
	log "building the verbs tests (cgo, -tags goroce_ibverbs)"
	TEST=$OUT/verbs.test
	(cd "$ROOT" && CGO_ENABLED=1 go test -c -tags goroce_ibverbs -o "$TEST" ./verbs) || die "build failed"
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
cp "$TEST" "$SHARE/goroce-cross/verbs.test"

# The host's process listens; the VM's connects (it retries until the
# listener is up) and runs in the foreground of the script.
log "host: goroce devices on $HOST_IP (netns $NS); vm0: rxe0 through libibverbs"
ip netns exec "$NS" env GOROCE_TEST_CROSS="listen $HOST_IP:$PORT" \
	"$TEST" -test.v -test.count=1 -test.timeout=900s -test.run "$RUN" >"$OUT/host.log" 2>&1 &
host=$!
"$VM" exec vm0 --timeout 900 -- \
	"cd /host/goroce-cross && GOROCE_TEST_BACKEND=hw:rxe0 GOROCE_TEST_CROSS='dial $HOST_IP:$PORT' ./verbs.test -test.v -test.count=1 -test.timeout=850s -test.run '$RUN'" \
	>"$OUT/vm.log" 2>&1
vrc=$?
wait "$host"
hrc=$?
rm -rf "$SHARE/goroce-cross"

# passed LOG: the cases (both directions' subtests) LOG says passed.
passed() { grep -E -- '--- PASS: .*→' "$1" | awk '{print $3}' | sort; }
passed "$OUT/host.log" >"$OUT/host.pass"
passed "$OUT/vm.log" >"$OUT/vm.pass"
n=$(wc -l <"$OUT/host.pass")
grep -E -- '--- (FAIL|SKIP)' "$OUT/host.log" "$OUT/vm.log" >&2
if [ $hrc -ne 0 ] || [ $vrc -ne 0 ] || grep -qE -- '--- (FAIL|SKIP)' "$OUT/host.log" "$OUT/vm.log"; then
	tail -40 "$OUT/host.log" >&2
	tail -40 "$OUT/vm.log" >&2
	die "FAILED (host rc $hrc, VM rc $vrc; logs $OUT/host.log, $OUT/vm.log)"
fi
if [ "$n" -eq 0 ] || ! cmp -s "$OUT/host.pass" "$OUT/vm.pass"; then
	diff "$OUT/host.pass" "$OUT/vm.pass" >&2
	die "the two processes did not pass the same cases (logs $OUT/host.log, $OUT/vm.log)"
fi
grep -E -- '--- PASS: .*→' "$OUT/host.log" | sed 's/^ *//' >&2
log "goroce (host) ↔ rxe0 through the hardware backend (VM): $n cases passed in both processes, both directions, 0 failed, 0 skipped"
ok=1
[ "${CROSS_VM_UP:-0}" = 1 ] && rm -rf "$OUT"
exit 0
