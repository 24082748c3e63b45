#!/usr/bin/env bash
# test/hw/run.sh: the hardware backend's tests against Linux's rxe.
#
# Builds the tests of internal/ibverbs and internal/rdmacm (goroce's
# bindings to rdma-core's libibverbs and librdmacm, issue 20; the rdmacm
# tests, package cm's TestHardware* and the kernel half of its
# TestBackend* (the event API), and rsocket's TestHardware*, connect
# through rxe0's address, HW_VM_IP) and of package verbs with cgo and -tags
# goroce_ibverbs on this host (Debian bookworm's libibverbs-dev, as in the
# VM), boots the rxe VM of ../shared/rxe-vm, and runs the test binaries
# there against rxe0, through the VM's 9p share. The host's kernel has no
# RDMA support, so on the host the ibverbs tests skip; here none may skip
# or fail. The verbs tests run their end-to-end tests (HW_VERBS_RUN, a
# -test.run pattern) with GOROCE_TEST_BACKEND=hw:rxe0: their ends are QPs
# of rxe0 connected to each other (internal/rdmatest). Those that need
# what only a goroce device has skip, naming it; none may fail.
# The tools built with the tag run there too, on rxe0 (--hw), between two
# processes: the four pingpongs (pingpong-vm.sh), goroce-devinfo,
# goroce-perf, goroce-rping, goroce-rstream and goroce-riostream
# (tools-vm.sh), each checked. Last,
# test/hw/cross.sh runs verbs' cross tests between a goroce device on the
# host and rxe0 in the VM, both directions.
#
#   sudo test/hw/run.sh                    # about 2 minutes with the VM image built
#
# Environment: RXE_VM_DIR (default ../shared/rxe-vm beside the repository),
# RXE_CACHE (the harness's cache, ~/.cache/rxe-vm), HW_VM_IP (10.99.0.2).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RXE_VM_DIR=${RXE_VM_DIR:-$(cd "$ROOT/.." && pwd)/shared/rxe-vm}
VM=$RXE_VM_DIR/rxe-vm.sh
VM_IP=${HW_VM_IP:-10.99.0.2}
CACHE=${RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rxe-vm}
SHARE=$CACHE/vms/vm0/share
OUT=$(mktemp -d /tmp/goroce-hw.XXXXXX)

# skips_name_backend LOG: every test that LOG (go test -v) says skipped
# gave the backend (GOROCE_TEST_BACKEND=hw:rxe0) in its output; prints
# those that did not.
skips_name_backend() {
	go tool test2json <"$1" | python3 -c '
import collections, json, sys
out, bad = collections.defaultdict(str), []
for line in sys.stdin:
    e = json.loads(line)
    t = e.get("Test")
    if t and e["Action"] == "output":
        out[t] += e["Output"]
    elif t and e["Action"] == "skip" and "GOROCE_TEST_BACKEND=hw:rxe0" not in out[t]:
        bad.append(t)
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)'
}
log() { printf '[hw %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "$*"; exit 1; }

[ -x "$VM" ] || die "harness not found: $VM (set RXE_VM_DIR)"
if ! dpkg -s libibverbs-dev librdmacm-dev >/dev/null 2>&1; then
	log "installing libibverbs-dev librdmacm-dev"
	DEBIAN_FRONTEND=noninteractive apt-get install -y libibverbs-dev librdmacm-dev >"$OUT/apt.log" 2>&1 ||
		{ apt-get update >>"$OUT/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y libibverbs-dev librdmacm-dev >>"$OUT/apt.log" 2>&1; } ||
		die "apt-get install libibverbs-dev librdmacm-dev failed (see $OUT/apt.log)"
fi

# The tools built with the tag: pingpong-vm.sh and tools-vm.sh run them.
HW_TOOLS="pingpong uc-pingpong srq-pingpong ud-pingpong perf rping devinfo rstream riostream"
log "building the ibverbs and verbs tests and the tools (cgo, -tags goroce_ibverbs)"
(cd "$ROOT" && CGO_ENABLED=1 go test -c -tags goroce_ibverbs -o "$OUT/ibverbs.test" ./internal/ibverbs &&
	CGO_ENABLED=1 go test -c -tags goroce_ibverbs -o "$OUT/verbs.test" ./verbs &&
	CGO_ENABLED=1 go test -c -tags goroce_ibverbs -o "$OUT/rdmacm.test" ./internal/rdmacm &&
	CGO_ENABLED=1 go test -c -tags goroce_ibverbs -o "$OUT/cm.test" ./cm &&
	CGO_ENABLED=1 go test -c -tags goroce_ibverbs -o "$OUT/rsocket.test" ./rsocket &&
	for t in $HW_TOOLS; do
		CGO_ENABLED=1 go build -tags goroce_ibverbs -o "$OUT/goroce-$t" ./cmd/goroce-$t || exit 1
	done) ||
	die "build failed"
# The VM emulates its processor (TCG): the end-to-end tests, not the
# software device's unit tests, which the host runs.
VERBS_RUN=${HW_VERBS_RUN:-'^Test(E2E|RCLoopback|RemoteRegionOneSided|PostSendList|QPEx|WaitRDMAWrite|MW|HardwareErrorText)'}

log "building the VM image (idempotent)"
"$VM" build >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" >&2; die "rxe-vm.sh build failed"; }
if "$VM" status 2>/dev/null | grep -q ': running'; then
	log "a VM of the harness is running: taking it down first"
	"$VM" down >>"$OUT/down.log" 2>&1
fi
cleanup() { "$VM" down >>"$OUT/down.log" 2>&1; }
trap cleanup EXIT
"$VM" net-up >"$OUT/start.log" 2>&1 || { cat "$OUT/start.log" >&2; die "net-up failed"; }
"$VM" start vm0 "$VM_IP" >>"$OUT/start.log" 2>&1 || { tail -30 "$OUT/start.log" >&2; die "VM start failed"; }
log "vm0 ready"

mkdir -p "$SHARE/goroce-hw"
cp "$OUT/ibverbs.test" "$OUT/verbs.test" "$OUT/rdmacm.test" "$OUT/cm.test" "$OUT/rsocket.test" "$SHARE/goroce-hw/"
for t in $HW_TOOLS; do cp "$OUT/goroce-$t" "$SHARE/goroce-hw/"; done
cp "$ROOT/test/hw/pingpong-vm.sh" "$ROOT/test/hw/tools-vm.sh" "$SHARE/goroce-hw/"
"$VM" exec vm0 --timeout 600 -- \
	"cd /host/goroce-hw && GOROCE_IBV_DEVICE=rxe0 ./ibverbs.test -test.v -test.count=1 &&
	 GOROCE_RDMACM_ADDR=$VM_IP ./rdmacm.test -test.v -test.count=1 &&
	 GOROCE_RDMACM_ADDR=$VM_IP ./cm.test -test.v -test.count=1 -test.run '^TestHardware' &&
	 GOROCE_RDMACM_ADDR=$VM_IP ./cm.test -test.v -test.count=1 -test.run '^TestBackend/^kernel$' &&
	 GOROCE_IBV_DEVICE=rxe0 GOROCE_RDMACM_ADDR=$VM_IP ./rsocket.test -test.v -test.count=1 -test.run '^TestHardware'" >"$OUT/tests.log" 2>&1
rc=$?
"$VM" exec vm0 --timeout 1200 -- \
	"cd /host/goroce-hw && GOROCE_TEST_BACKEND=hw:rxe0 ./verbs.test -test.v -test.count=1 -test.timeout=1100s -test.run '$VERBS_RUN'" >"$OUT/verbs.log" 2>&1
vrc=$?
"$VM" exec vm0 --timeout 600 -- 'cd /host/goroce-hw && sh ./pingpong-vm.sh' >"$OUT/pingpong.log" 2>&1
prc=$?
"$VM" exec vm0 --timeout 900 -- "cd /host/goroce-hw && sh ./tools-vm.sh $VM_IP" >"$OUT/tools.log" 2>&1
trc=$?
rm -rf "$SHARE/goroce-hw"
grep -E '^(=== RUN|--- |PASS|FAIL|ok)' "$OUT/tests.log" | grep -v '^=== RUN' >&2
if [ $rc -ne 0 ] || grep -q -- '--- FAIL' "$OUT/tests.log"; then
	tail -40 "$OUT/tests.log" >&2
	die "FAILED against rxe0 (rc $rc; log $OUT/tests.log)"
fi
if grep -q -- '--- SKIP' "$OUT/tests.log"; then
	die "tests skipped against rxe0: the device was not found (log $OUT/tests.log)"
fi
passed=$(grep -c -- '--- PASS' "$OUT/tests.log")
[ "$passed" -gt 0 ] || die "no test passed (log $OUT/tests.log)"
log "ibverbs, rdmacm, cm's and rsocket's hardware path: $passed passed against rxe0, 0 failed, 0 skipped"

# verbs: subtests count as tests; a skip must name the backend.
grep -E -- '--- (PASS|FAIL|SKIP)' "$OUT/verbs.log" >&2
if [ $vrc -ne 0 ] || grep -q -- '--- FAIL' "$OUT/verbs.log"; then
	tail -60 "$OUT/verbs.log" >&2
	die "verbs FAILED against rxe0 (rc $vrc; log $OUT/verbs.log)"
fi
vpass=$(grep -c -- '--- PASS' "$OUT/verbs.log")
vskip=$(grep -c -- '--- SKIP' "$OUT/verbs.log")
[ "$vpass" -gt 0 ] || die "no verbs test passed (log $OUT/verbs.log)"
# A skip's reason is in its test's output, which test2json attributes
# (the line before a --- SKIP is not it: a parent's subtests are reported
# after the parent's own line).
if ! skips_name_backend "$OUT/verbs.log"; then
	die "a verbs test skipped for another reason than the backend (log $OUT/verbs.log)"
fi
log "verbs on rxe0: $vpass passed, $vskip skipped (each naming the backend), 0 failed"

# The pingpong tools, built with the tag, between two processes on rxe0.
cat "$OUT/pingpong.log" >&2
if [ $prc -ne 0 ] || [ "$(grep -c 'on rxe0: ok' "$OUT/pingpong.log")" -ne 4 ]; then
	die "the pingpongs FAILED on rxe0 (rc $prc; log $OUT/pingpong.log)"
fi
log "goroce-{,uc-,srq-,ud-}pingpong --hw on rxe0: 4 of 4 passed"

# goroce-devinfo, goroce-perf, goroce-rping, goroce-rstream and
# goroce-riostream --hw on rxe0, each checked (tools-vm.sh says how): 14
# checks.
cat "$OUT/tools.log" >&2
tok=$(grep -c 'on rxe0: ok$' "$OUT/tools.log")
if [ $trc -ne 0 ] || [ "$tok" -ne 14 ]; then
	die "the tools FAILED on rxe0 (rc $trc, $tok of 14 passed; log $OUT/tools.log)"
fi
log "goroce-devinfo, goroce-perf, goroce-rping, goroce-r{,io}stream --hw on rxe0: 14 of 14 passed"

# A goroce device on the host and rxe0 through the backend, the same tests
# at both ends, with this run's VM and verbs tests (test/hw/cross.sh).
CROSS_VM_UP=1 CROSS_VERBS_TEST="$OUT/verbs.test" CROSS_CM_TEST="$OUT/cm.test" RXE_VM_DIR="$RXE_VM_DIR" "$ROOT/test/hw/cross.sh" ||
	die "goroce ↔ rxe0 (test/hw/cross.sh) FAILED"
