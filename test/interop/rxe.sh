#!/usr/bin/env bash
# rxe.sh - interoperability test of goroce against Linux Soft-RoCE (rdma_rxe).
#
# Boots the rxe VM of ../shared/rxe-vm (Debian, rdma_rxe, perftest, rdma-core)
# on the bridge of the network namespace "rdmatest" and runs goroce's tools in
# that namespace against the VM's, in both roles:
#
#   goroce-perf write_bw, read_bw, send_bw   vs ib_write_bw, ib_read_bw, ib_send_bw
#                                            (-x 1, MTU 1024; sizes 1, 1024, 1025, 65536)
#   goroce-perf atomic_bw -A CMP_AND_SWAP / FETCH_AND_ADD   vs ib_atomic_bw
#   goroce-perf write_lat                    vs ib_write_lat (64 B)
#   goroce-perf write_bw, send_bw, write_lat, send_lat -c UC
#                                            vs the same perftest tests -c UC
#   goroce-perf send_bw, send_lat -c UD      vs ib_send_bw, ib_send_lat -c UD
#   goroce-pingpong -c                       vs ibv_rc_pingpong -g 1 -c (1 B, 4096 B)
#   goroce-uc-pingpong -c                    vs ibv_uc_pingpong -g 1 -c (1 B, 4096 B)
#   goroce-ud-pingpong -c                    vs ibv_ud_pingpong -g 1 -c (1 B, 1024 B)
#   goroce-srq-pingpong -c -q 4              vs ibv_srq_pingpong -g 1 -c -q 4 (1 B, 4096 B)
#   goroce-rping -V                          vs rping -V (26 B, 64 B, 5000 B; -C 10)
#   goroce-perf write_bw, read_bw, send_bw -R, write_lat -R
#                                            vs the same perftest tests -R (rdma_cm:
#                                            no TCP; 1024 B, 65536 B, 64 B)
#   goroce-rstream -T v                      vs rstream -T v (rsockets over rdma_cm:
#                                            64 B, 1000 B, 65536 B, 1 MiB, 3 MiB + 1;
#                                            data verified by both; and -k 1, keepalive)
#   goroce-riostream -T v                    vs riostream -T v (rsockets' iomap: riomap,
#                                            riowrite; 64 B to 3 MiB + 1, data verified)
#   a connect to a port nobody listens on    refused with REJ "invalid service ID"
#                                            (8), goroce-rping and rping each way
#   libgoroce: Debian's ib_write_bw, ib_read_bw, ib_send_bw (1025 B, 65536 B),
#   ib_write_lat (64 B) and ibv_rc_pingpong -c (4096 B) run on goroce0 through
#   goroce-exec (libgoroce.so and a goroce-nic daemon bound to 10.99.0.1 in
#   the namespace)                           vs the same tools on rxe
#
# A scenario passes when both sides exit 0 and both print their result line
# for the requested size and iteration count. perftest does not look at the
# data it moves: there, success means every work request completed without
# error on both sides; the pingpong scenarios (-c) check the bytes received.
# A scenario whose perftest in the VM failed only to calibrate its clock
# ("Can't produce a report", or inf for every latency figure: a busy host
# descheduling the VM) runs again, up to five times in all.
# Meanwhile br0 is captured (tcpdump, UDP port 4791), and after the run:
#
#   rxe counters                  no error counter of rxe0 grew (see
#                                 ERROR_COUNTERS; two exceptions, explained by
#                                 the capture, at the check)
#   rxe counters: packets         rxe's sent_pkts+rcvd_pkts equal the
#                                 captured packets: rxe dropped none of ours
#                                 (it drops a bad ICRC without counting it)
#   capture: goroce-dump --check  every RoCEv2 packet parses, fits MTU 1024
#                                 and carries a valid ICRC
#   capture: tshark               tshark decodes every UDP 4791 packet as
#                                 InfiniBand (RRoCE), no header malformed
#
# Output: one "PASS name" or "FAIL name" line per check (details of a failure
# follow, indented), then "N passed, M failed". Exit status 0 only when
# nothing failed. The VMs are stopped and the namespace deleted on exit,
# also when interrupted.
#
# Usage (as root, from anywhere): test/interop/rxe.sh
# Environment:
#   RXE_VM_DIR  the harness (default: ../shared/rxe-vm beside the repository)
#   ONLY        run only scenarios whose name matches this extended regex
#   OUT         keep logs, counters and the capture in this directory
#               (default: a temporary directory, kept only when a check fails)
#   ITERS       iterations of the bandwidth and latency tests (default 100)
#   TIMEOUT     seconds per scenario (default 60)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RXE_VM_DIR=${RXE_VM_DIR:-$(cd "$ROOT/.." && pwd)/shared/rxe-vm}
VM=$RXE_VM_DIR/rxe-vm.sh
NS=${RXE_NETNS:-rdmatest}
HOST_IP=10.99.0.1
VM_IP=10.99.0.2
MTU=1024
ITERS=${ITERS:-100}
PP_ITERS=10
TIMEOUT=${TIMEOUT:-60}
ONLY=${ONLY:-}
# perftest and the ibv_*_pingpong examples all meet on this TCP port
OOB_PORT=18515
HW=/sys/class/infiniband/rxe0/ports/1/hw_counters
# separates a VM job's output from the counters it appends
MARK=--rxe-hw-counters--

# rxe counters that must not grow. Which side they blame, in rxe's terms:
#   rcvd_seq_err            rxe's completer got a PSN sequence error NAK
#                           (from us: we saw a gap in its requests)
#   duplicate_request,      rxe's responder got a request it had already
#   out_of_seq_request      executed / one ahead of the expected PSN: we
#                           retransmitted or skipped PSNs
#   retry_exceeded_err,     rxe gave up retransmitting to us (we did not
#   completer_retry_err     acknowledge) or had to retransmit at all
#   rcvd_rnr_err,           we answered rxe's SENDs with RNR NAKs / it gave
#   retry_rnr_exceeded_err  up on them: every scenario posts all its receives
#                           before the exchange (rx depth >= iterations), so
#                           a receiver-not-ready from goroce is a bug here
#   send_err, link_downed   rxe could not send / lost its port
# Not an error: send_rnr_err (rxe, as responder, asked us to wait because
# its application had no receive posted yet: flow control that goroce must
# obey, and a scenario that then completes shows it did), and the traffic
# counters (sent_pkts, rcvd_pkts, rdma_sends, rdma_recvs, ack_deferred,
# lifespan).
ERROR_COUNTERS="rcvd_seq_err duplicate_request out_of_seq_request retry_exceeded_err
retry_rnr_exceeded_err send_err completer_retry_err rcvd_rnr_err link_downed"

# RETRANSMISSIONS_AWK reads goroce-dump's lines and prints "S T U L": how
# many requests rxe resent that goroce had already answered (S); that it
# had not, while it sent nothing at all on that connection since the
# request, and answered later (T: goroce did not run, see the check); that
# asked for no answer (no AckReq bit, not a READ or atomic) and that goroce
# answered later (U: rxe's timer resends its whole window, and a responder
# may coalesce its ACK of such packets into a later one, IBTA 9.7.5.1.3);
# and the others (L: goroce was running but had not answered a request
# that asked for an answer, or never answered; also listed on stderr, with
# the T and U ones).
#
# A connection is told by its UDP source port, which both directions share
# (both derive it from the two QP numbers), except for the ACKs goroce
# gathers at the end of a receive batch: those leave from its device's
# port, 4791. A goroce response is matched to its connection by the PSN of
# the request it answers, whose port names the connection (PSNs are random
# 24-bit numbers: two connections' PSNs coincide by chance once in
# millions), or, for a READ response past the first, by the destination QPN
# (rxe's QP) of the earlier responses. goroce answers with ACKNOWLEDGE,
# ATOMIC_ACKNOWLEDGE or READ responses carrying the PSN of the request,
# answering all before it. A goroce packet captured less than 1 ms after a
# request may have crossed it on the wire and does not count as sent since.
# shellcheck disable=SC2016 # an awk program: no shell expansion wanted
RETRANSMISSIONS_AWK='
function hex(s,   i, n) {
    n = 0
    for (i = 1; i <= length(s); i++) n = n * 16 + index("0123456789abcdef", tolower(substr(s, i, 1))) - 1
    return n
}
function response(op) { return op == "ACKNOWLEDGE" || op == "ATOMIC_ACKNOWLEDGE" || op ~ /^RDMA_READ_RESPONSE/ }
function psn_ge(a, b) { return (a - b + 16777216) % 16777216 < 8388608 }
# frame time src:port -> dst RC OPCODE qpn=0x... psn=0x...
$4 == "→" && $6 == "RC" && $9 ~ /^psn=0x/ {
    split($3, sp, ":"); src = sp[1]; port = sp[2]
    psn = hex(substr($9, 7)); op = $7; qpn = $8; t = $2 + 0
    if (src == rxe && !response(op)) {
        # whether the first copy asked for an answer: rxe sets AckReq on
        # packets of a retry round that did not ask the first time
        if (!((port, psn) in first) && ($10 ~ /^A/ || op ~ /READ_REQUEST|COMPARE_SWAP|FETCH_ADD|ATOMIC/)) asks[port, psn] = 1
        if ((port, psn) in first) {
            if ((port in answered) && psn_ge(answered[port], psn)) spurious++
            else if (!((port, psn) in resent)) {
                resent[port, psn] = $0
                busy[port, psn] = (port in sent) && sent[port] > first[port, psn] + 0.001
            }
        } else first[port, psn] = t
        portOf[psn] = port
    } else if (src != rxe) {
        if (response(op)) {
            if (port != 4791) conn[qpn] = port
            else if (psn in portOf) conn[qpn] = portOf[psn]
            else if (!(qpn in conn)) next
            port = conn[qpn]
            if ($0 !~ /NAK/ && (!(port in answered) || psn_ge(psn, answered[port]))) answered[port] = psn
        }
        sent[port] = t
    }
}
END {
    for (k in resent) {
        split(k, kp, SUBSEP)
        if (!busy[k] && (kp[1] in answered) && psn_ge(answered[kp[1]], kp[2])) {
            stalled++; print "rxe resent a request goroce answered after a stall: " resent[k] > "/dev/stderr"
        } else if (!(k in asks) && (kp[1] in answered) && psn_ge(answered[kp[1]], kp[2])) {
            unasked++; print "rxe resent a request that asked for no ACK, answered later: " resent[k] > "/dev/stderr"
        } else {
            late++; print "rxe resent a request goroce had not answered: " resent[k] > "/dev/stderr"
        }
    }
    print spurious + 0, stalled + 0, unasked + 0, late + 0
}
'

# GOROCE_RETRANSMISSIONS_AWK is the same for goroce's retransmissions: it
# prints "T E": how many went out after the retransmit timer (at least
# 60 ms after the first copy of that PSN, the timeout being 67 ms in every
# scenario) with no answer from rxe covering the PSN (T), and how many
# before the timer or after such an answer (E, also listed on stderr). An
# answer captured less than 1 ms before a retransmission may have crossed
# it on the wire and does not count; copies of one PSN less than 1 ms apart
# are one transmission (goroce sends the head of a retry round three times,
# and a READ resumed mid-message has a PSN no earlier request carried).
# shellcheck disable=SC2016 # an awk program: no shell expansion wanted
GOROCE_RETRANSMISSIONS_AWK='
function hex(s,   i, n) {
    n = 0
    for (i = 1; i <= length(s); i++) n = n * 16 + index("0123456789abcdef", tolower(substr(s, i, 1))) - 1
    return n
}
function response(op) { return op == "ACKNOWLEDGE" || op == "ATOMIC_ACKNOWLEDGE" || op ~ /^RDMA_READ_RESPONSE/ }
function psn_ge(a, b) { return (a - b + 16777216) % 16777216 < 8388608 }
$4 == "→" && $6 == "RC" && $9 ~ /^psn=0x/ {
    split($3, sp, ":"); src = sp[1]; port = sp[2]
    psn = hex(substr($9, 7)); op = $7; t = $2 + 0
    if (src != rxe && !response(op)) {
        if (!((port, psn) in first)) { first[port, psn] = t; last[port, psn] = t; next }
        # the head of a retry round leaves up to three times in a row
        if (t - last[port, psn] < 0.001) { last[port, psn] = t; next }
        last[port, psn] = t
        if ((port in answered) && psn_ge(answered[port], psn) && answeredAt[port] < t - 0.001 || t - first[port, psn] < 0.060) {
            early++; print "goroce resent a request before its timer or after rxe answered it: " $0 > "/dev/stderr"
        } else timely++
    } else if (src == rxe && response(op) && $0 !~ /NAK/) {
        if (!(port in answered) || psn_ge(psn, answered[port])) { answered[port] = psn; answeredAt[port] = t }
    }
}
END { print timely + 0, early + 0 }
'

log() { echo "[interop $(date +%T)] $*" >&2; }
# die REASON: the run cannot go on; it still ends in the summary lines
die() {
    log "ERROR: $*"
    echo "FAIL setup: $*"
    FAILED=$((${FAILED:-0} + 1))
    # tear down first (once the VM may be up), so that the summary comes last
    if declare -F cleanup >/dev/null; then cleanup; fi
    echo "${PASSED:-0} passed, $FAILED failed"
    exit 2
}

[ "$(id -u)" = 0 ] || die "must run as root (network namespace, qemu, tcpdump)"
[ -x "$VM" ] || die "harness not found: $VM (set RXE_VM_DIR)"
export PATH=/usr/local/go/bin:$PATH

if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" || die "cannot create $OUT"
    WORK=$(cd "$OUT" && pwd)
    KEEP=1
else
    WORK=$(mktemp -d /tmp/goroce-interop.XXXXXX)
    KEEP=0
fi
BIN=$WORK/bin
LOGS=$WORK/logs
CAP=$WORK/br0.pcap
mkdir -p "$BIN" "$LOGS"

PASSED=0
FAILED=0
FAILED_NAMES=()
TCPDUMP_PID=
NIC_PID=
SERVER_PID=
CHILD_PID=
VM_UP=0
CLEANED=0
T_START=$SECONDS

# The traps can fire inside a command whose output goes to a log file; they
# write to the script's own stdout and stderr, saved here as fds 3 and 4.
exec 3>&1 4>&2

cleanup() {
    [ "$CLEANED" = 1 ] && return
    CLEANED=1
    exec 1>&3 2>&4
    local p
    for p in $CHILD_PID $SERVER_PID $TCPDUMP_PID $NIC_PID; do
        kill "$p" 2>/dev/null
    done
    for p in $CHILD_PID $SERVER_PID $TCPDUMP_PID $NIC_PID; do
        wait "$p" 2>/dev/null
    done
    if [ "$VM_UP" = 1 ]; then
        log "stopping the VM and deleting netns $NS"
        "$VM" down >"$LOGS/down.log" 2>&1 || cat "$LOGS/down.log" >&2
    fi
    if [ "$KEEP" = 0 ] && [ "$FAILED" = 0 ]; then
        rm -rf "$WORK"
    else
        log "logs and capture kept in $WORK"
    fi
}
trap cleanup EXIT
trap 'log "interrupted" 2>&4; exit 130' INT
trap 'log "terminated" 2>&4; exit 143' TERM

# run CMD... in the background and wait for it, so that a signal to this
# script is handled at once (bash runs traps only between commands, but
# "wait" returns early on a trapped signal); its pid is known to cleanup.
run() {
    "$@" &
    CHILD_PID=$!
    wait "$CHILD_PID"
    local rc=$?
    CHILD_PID=
    return $rc
}

pass() {
    echo "PASS $1"
    PASSED=$((PASSED + 1))
}

# fail NAME [DETAIL-FILE...]: prints the tail of each file, indented.
fail() {
    local name=$1 f
    shift
    echo "FAIL $name"
    for f in "$@"; do
        [ -s "$f" ] || continue
        echo "    --- $(basename "$f") (last lines)"
        tail -n 20 "$f" | sed 's/^/    /'
    done
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$name")
}

selected() { [ -z "$ONLY" ] || [[ $1 =~ $ONLY ]]; }

# ----------------------------------------------------------------------------- setup
log "building goroce-perf, the goroce-*pingpong commands, goroce-dump into $BIN"
(cd "$ROOT" && go build -o "$BIN/" ./cmd/goroce-perf ./cmd/goroce-rping ./cmd/goroce-pingpong ./cmd/goroce-uc-pingpong \
    ./cmd/goroce-ud-pingpong ./cmd/goroce-srq-pingpong ./cmd/goroce-dump ./cmd/goroce-rstream ./cmd/goroce-riostream) \
    || die "go build failed"

# libgoroce's scenarios run Debian's perftest, ibv_rc_pingpong and
# rdmacm-utils on the host (CI installs them with test/libgoroce/run.sh;
# here if missing); libgoroce.so builds against libibverbs' and
# librdmacm's headers.
if ! command -v ib_write_bw >/dev/null || ! command -v ibv_rc_pingpong >/dev/null ||
    ! command -v ucmatose >/dev/null || ! [ -f /usr/include/infiniband/verbs.h ] ||
    ! [ -f /usr/include/rdma/rdma_cma.h ]; then
    log "installing perftest, ibverbs-utils, rdmacm-utils, gcc, libibverbs-dev and librdmacm-dev for the libgoroce scenarios"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq perftest ibverbs-utils rdmacm-utils gcc \
        libibverbs-dev librdmacm-dev >"$LOGS/apt.log" 2>&1 || die "apt-get install for the libgoroce scenarios failed"
fi
log "building goroce-exec and libgoroce.so into $BIN"
(cd "$ROOT" && go build -o "$BIN/" ./cmd/goroce-exec && make -s -C libgoroce OUT="$BIN/libgoroce.so") \
    >"$LOGS/libgoroce-build.log" 2>&1 || { cat "$LOGS/libgoroce-build.log" >&2; die "libgoroce build failed"; }

log "building the VM image (idempotent)"
run "$VM" build >"$LOGS/build.log" 2>&1 || { tail -30 "$LOGS/build.log" >&2; die "rxe-vm.sh build failed"; }
for t in tcpdump tshark ss; do
    command -v "$t" >/dev/null || die "$t not found (rxe-vm.sh build installs it)"
done

# A VM left over from an interrupted run would hold the addresses and ports.
if "$VM" status 2>/dev/null | grep -q ': running'; then
    log "a VM of the harness is running: taking it down first"
    "$VM" down >>"$LOGS/down.log" 2>&1
fi
VM_UP=1
run "$VM" net-up >"$LOGS/start.log" 2>&1 || { cat "$LOGS/start.log" >&2; die "net-up failed"; }
t0=$SECONDS
run "$VM" start vm0 "$VM_IP" >>"$LOGS/start.log" 2>&1 || { tail -30 "$LOGS/start.log" >&2; die "VM start failed"; }
log "vm0 ($VM_IP) ready after $((SECONDS - t0)) s"

# The VM is emulated (TCG): every guest instruction is host CPU time. When the
# host is busy, perftest in the guest cannot calibrate its clock ("inf") and
# rxe answers later than a requester's 67 ms timeout. The VM runs at a higher
# priority than the host's other work so that the scenarios measure goroce,
# not the host's load (the goroce side keeps normal priority).
VM_CACHE=${RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rxe-vm}
if qemu_pid=$(cat "$VM_CACHE/vms/vm0/qemu.pid" 2>/dev/null) && [ -d "/proc/$qemu_pid" ]; then
    # nice is per thread on Linux: renice every thread (the vCPU threads
    # already exist once the VM has booted)
    renice -n -10 -p $(ls "/proc/$qemu_pid/task") >/dev/null &&
        log "qemu (pid $qemu_pid, $(ls "/proc/$qemu_pid/task" | wc -l) threads) reniced to -10"
else
    log "qemu pid not found in $VM_CACHE/vms/vm0/qemu.pid: the VM keeps normal priority"
fi

# snapshot FILE: the VM's counters now, as name:value lines
snapshot() {
    run "$VM" exec vm0 --timeout 30 -- "cd $HW && grep . *" >"$1" 2>"$1.err"
}
snapshot "$WORK/counters.0" || die "cannot read rxe counters: $(cat "$WORK/counters.0.err")"

cp "$WORK/counters.0" "$WORK/counters.prev"

# The capture, in the namespace: everything goroce and rxe send each other.
# --immediate-mode: without it the kernel hands packets over in blocks, and
# the last packets of the run would still be in the ring when tcpdump stops;
# -B 65536 (KiB) and -s 2048 (br0's frames are at most 1514 bytes): the ring
# has a slot of the snap length per packet, so with tcpdump's default snap
# length (256 KiB) it would hold only 256 packets, and on a busy machine the
# bursts of 64 KiB messages overran it while tcpdump waited for a CPU.
ip netns exec "$NS" tcpdump -i br0 -n -s 2048 -B 65536 -U --immediate-mode -w "$CAP" udp port 4791 2>"$LOGS/tcpdump.log" &
TCPDUMP_PID=$!
for _ in $(seq 1 100); do
    grep -q 'listening on' "$LOGS/tcpdump.log" && break
    kill -0 "$TCPDUMP_PID" 2>/dev/null || break
    sleep 0.1
done
grep -q 'listening on' "$LOGS/tcpdump.log" || die "tcpdump did not start: $(cat "$LOGS/tcpdump.log")"

# ----------------------------------------------------------------------------- scenarios
# vm_cmd TOOL-COMMAND: the VM job: the tool under a timeout, then the
# counters after the marker; the job's status is the tool's.
vm_cmd() {
    echo "timeout $TIMEOUT $1; rc=\$?; echo $MARK; cd $HW && grep . *; exit \$rc"
}

# logname NAME: the scenario's name as a file name
logname() {
    local n=${1//\//_}
    echo "${n//=/}"
}

# split_vm_out NAME FILE: moves the counters the VM job appended to
# counters.FILE and keeps the tool's output in FILE.vm.log; records which
# error counters the scenario raised.
split_vm_out() {
    local name=$1 f=$2 raw=$LOGS/$2.vm.raw
    sed "/^$MARK\$/,\$d" "$raw" >"$LOGS/$f.vm.log"
    if grep -q "^$MARK\$" "$raw"; then
        sed "1,/^$MARK\$/d" "$raw" >"$WORK/counters.$f"
        counter_deltas "$WORK/counters.prev" "$WORK/counters.$f" |
            awk -v n="$name" -v errs="$ERROR_COUNTERS" '
                BEGIN { split(errs, e); for (i in e) bad[e[i]] = 1 }
                $1 in bad && $2 > 0 { print n ": " $1 " +" $2 }' >>"$WORK/counter-errors"
        cp "$WORK/counters.$f" "$WORK/counters.prev"
    fi
    rm -f "$raw"
}

# counter_deltas OLD NEW: "name delta" for every counter that changed
counter_deltas() {
    awk -F: 'NR == FNR { old[$1] = $2; next } $2 != old[$1] { print $1, $2 - old[$1] }' "$1" "$2"
}

# has_result SIZE ITERS FILE: the perftest-format result row
# ("#bytes #iterations ...") for this size and count is in FILE
has_result() {
    grep -Eq "^ *$1 +$2 +[0-9]" "$3"
}

# has_pingpong ITERS FILE: the pingpong examples' closing line is in FILE
has_pingpong() {
    grep -Eq "^$1 iters in [0-9.]+ seconds" "$2"
}

# wait_listen_host: goroce's server is listening on the OOB port, or, for
# the rdma_cm scenarios (CM_PORT set), has printed CM_READY in its log
wait_listen_host() {
    local _
    for _ in $(seq 1 100); do
        if [ -n "$CM_PORT" ]; then
            grep -q "$CM_READY" "$LOGS/$f.host.log" 2>/dev/null && return 0
        else
            ip netns exec "$NS" ss -Hltn "sport = :$OOB_PORT" | grep -q . && return 0
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# wait_listen_vm: the VM's server is listening on the OOB port, or with an
# rdma_cm ID on CM_PORT
wait_listen_vm() {
    local probe="ss -Hltn 'sport = :$OOB_PORT' | grep -q ."
    [ -z "$CM_PORT" ] || probe="rdma res show cm_id | grep -q 'state LISTEN .* src-addr [^ ]*:$CM_PORT '"
    run "$VM" exec vm0 --timeout 30 -- \
        "for i in \$(seq 1 150); do $probe && exit 0; sleep 0.1; done; exit 1" \
        >/dev/null 2>&1
}

# vm_server NAME CHECK VM-TOOL-COMMAND HOST-TOOL-COMMAND
#   the VM serves, goroce connects. CHECK is a command run with each side's
#   log as its last argument; it must succeed for both.
vm_server() {
    local name=$1 check=$2 vmc=$3 hostc=$4 id hrc vrc f
    selected "$name" || return 0
    f=$(logname "$name")
    local t0=$SECONDS attempt
    for ((attempt = 1; attempt <= CLOCK_ATTEMPTS; attempt++)); do
        id=$("$VM" exec vm0 --bg -- "$(vm_cmd "$vmc")")
        wait_listen_vm || log "$name: the VM's server is not listening yet, trying anyway"
        # shellcheck disable=SC2086
        run ip netns exec "$NS" timeout -k 5 "$TIMEOUT" $hostc >"$LOGS/$f.host.log" 2>&1
        hrc=$?
        run "$VM" wait vm0 "$id" $((TIMEOUT + 30)) >"$LOGS/$f.vm.raw" 2>&1
        vrc=$?
        split_vm_out "$name" "$f"
        if [ "$attempt" -lt "$CLOCK_ATTEMPTS" ] && clock_failed "$name" "$f" "$vrc" "$attempt"; then sleep 2; continue; fi
        break
    done
    finish "$name" "$f" "$check" "$hrc" "$vrc" $((SECONDS - t0))
}

# host_server NAME CHECK HOST-TOOL-COMMAND VM-TOOL-COMMAND
#   goroce serves, the VM connects.
host_server() {
    local name=$1 check=$2 hostc=$3 vmc=$4 hrc vrc f
    selected "$name" || return 0
    f=$(logname "$name")
    local t0=$SECONDS attempt
    for ((attempt = 1; attempt <= CLOCK_ATTEMPTS; attempt++)); do
        # shellcheck disable=SC2086
        ip netns exec "$NS" timeout -k 5 "$TIMEOUT" $hostc >"$LOGS/$f.host.log" 2>&1 &
        SERVER_PID=$!
        wait_listen_host || log "$name: goroce's server is not listening, trying anyway"
        run "$VM" exec vm0 --timeout $((TIMEOUT + 30)) -- "$(vm_cmd "$vmc")" >"$LOGS/$f.vm.raw" 2>&1
        vrc=$?
        wait "$SERVER_PID"
        hrc=$?
        SERVER_PID=
        split_vm_out "$name" "$f"
        if [ "$attempt" -lt "$CLOCK_ATTEMPTS" ] && clock_failed "$name" "$f" "$vrc" "$attempt"; then sleep 2; continue; fi
        break
    done
    finish "$name" "$f" "$check" "$hrc" "$vrc" $((SECONDS - t0))
}

# clock_failed NAME FILE VM-STATUS ATTEMPT: the rxe side (or the host's perftest of
# a libgoroce scenario) failed only because perftest could not calibrate its
# cycle counter: it times gettimeofday
# against the TSC at report time and gives up ("Correlation coefficient
# r^2: ... < 0.9") when the VM (TCG) is descheduled meanwhile on a busy
# host, after the traffic went through. The bandwidth tests then print
# "Can't produce a report" and exit 1; the latency tests divide by the
# zero frequency instead (print_report_lat has no check) and print inf for
# every figure, with exit status 0. Then the scenario runs again, two
# seconds later, up to CLOCK_ATTEMPTS times in all (at load 4 both of two
# attempts failed so, r^2 0.61 and 0.75, while the traffic went through;
# a CI run on 2026-12-02 saw three attempts within five seconds fail so,
# with goroce's side complete each time), the earlier logs kept as
# FILE.attemptN.*.
CLOCK_ATTEMPTS=5
clock_failed() {
    local name=$1 f=$2 vrc=$3 attempt=$4 log=$LOGS/$2.vm.log
    if [ "$vrc" != 0 ] && grep -q "^Can't produce a report" "$log"; then
        :
    elif grep -q "^Can't produce a report" "$LOGS/$f.host.log"; then
        : # perftest on the host, through libgoroce, failed the same way
    elif grep -q "^Correlation coefficient r^2: .* < 0.9" "$log" && grep -Eq "^ *[0-9]+ +[0-9]+ +inf " "$log"; then
        :
    elif grep -q "^Correlation coefficient r^2: .* < 0.9" "$LOGS/$f.host.log" &&
        grep -Eq "^ *[0-9]+ +[0-9]+ +inf " "$LOGS/$f.host.log"; then
        : # a latency test's perftest on the host, through libgoroce (seen at load 7)
    else
        return 1
    fi
    log "$name: a perftest could not calibrate its clock (host load); running it again"
    mv "$LOGS/$f.host.log" "$LOGS/$f.attempt$attempt.host.log"
    mv "$LOGS/$f.vm.log" "$LOGS/$f.attempt$attempt.vm.log"
    return 0
}

finish() {
    local name=$1 f=$2 check=$3 hrc=$4 vrc=$5 secs=$6 why=()
    [ "$hrc" = 0 ] || why+=("goroce exit status $hrc")
    [ "$vrc" = 0 ] || why+=("rxe side exit status $vrc")
    # shellcheck disable=SC2086
    $check "$LOGS/$f.host.log" || why+=("no result line from goroce")
    # shellcheck disable=SC2086
    $check "$LOGS/$f.vm.log" || why+=("no result line from the rxe side")
    log "$name: ${secs} s"
    if [ ${#why[@]} = 0 ]; then
        pass "$name"
    else
        fail "$name" "$LOGS/$f.host.log" "$LOGS/$f.vm.log"
        local w
        for w in "${why[@]}"; do echo "    $w"; done
    fi
}

P="$BIN/goroce-perf"
PP="$BIN/goroce-pingpong"
R="$BIN/goroce-rping"
RS="$BIN/goroce-rstream"
RIS="$BIN/goroce-riostream"
CM_PORT= # set for the rdma_cm scenarios: no TCP to wait for
CM_READY=

# goroce-perf waits up to 1 s (-u 18) for each ACK, as in the -R and
# libgoroce scenarios: on a host loaded far beyond its 2 CPUs (seen at load
# 20), goroce or the emulated VM can stall for longer than 8 x 67 ms and a
# 64 KiB WRITE ended in "transport retry counter exceeded". The scenarios
# test the protocol against rxe; the loss and timeout paths are tested in
# test/faults and the transport's own tests. rxe keeps perftest's default.
# bandwidth: every verb, sizes around the 1024-byte MTU, both roles
for t in write read send; do
    for s in 1 1024 1025 65536; do
        args="-x 1 -m $MTU -n $ITERS -s $s"
        vm_server "${t}_bw/s=$s/goroce-client" "has_result $s $ITERS" \
            "ib_${t}_bw -d rxe0 $args" "$P ${t}_bw --bind $HOST_IP -u 18 $args $VM_IP"
        host_server "${t}_bw/s=$s/goroce-server" "has_result $s $ITERS" \
            "$P ${t}_bw --bind $HOST_IP -u 18 $args" "ib_${t}_bw -d rxe0 $args $HOST_IP"
    done
done

# atomics: both operations, both roles (always 8 bytes)
for a in CMP_AND_SWAP FETCH_AND_ADD; do
    args="-x 1 -m $MTU -n $ITERS -A $a"
    vm_server "atomic_bw/$a/goroce-client" "has_result 8 $ITERS" \
        "ib_atomic_bw -d rxe0 $args" "$P atomic_bw --bind $HOST_IP -u 18 $args $VM_IP"
    host_server "atomic_bw/$a/goroce-server" "has_result 8 $ITERS" \
        "$P atomic_bw --bind $HOST_IP -u 18 $args" "ib_atomic_bw -d rxe0 $args $HOST_IP"
done

# latency: WRITE ping-pong, both roles
args="-x 1 -m $MTU -n $ITERS -s 64"
vm_server "write_lat/s=64/goroce-client" "has_result 64 $ITERS" \
    "ib_write_lat -d rxe0 $args" "$P write_lat --bind $HOST_IP -u 18 $args $VM_IP"
host_server "write_lat/s=64/goroce-server" "has_result 64 $ITERS" \
    "$P write_lat --bind $HOST_IP -u 18 $args" "ib_write_lat -d rxe0 $args $HOST_IP"

# ibv_rc_pingpong: SEND/RECV with the data checked on both sides (-c);
# 4096 bytes (the default) is four MTU-sized packets, 1 byte a single one
for s in 1 4096; do
    args="-g 1 -m $MTU -n $PP_ITERS -s $s -c"
    vm_server "rc_pingpong/s=$s/goroce-client" "has_pingpong $PP_ITERS" \
        "ibv_rc_pingpong -d rxe0 $args" "$PP --bind $HOST_IP $args $VM_IP"
    host_server "rc_pingpong/s=$s/goroce-server" "has_pingpong $PP_ITERS" \
        "$PP --bind $HOST_IP $args" "ibv_rc_pingpong -d rxe0 $args $HOST_IP"
done

# UC and UD: perftest's tests for each (UC: no READ or atomics; UD: SEND
# only, one packet per message), both roles. Neither transport has flow
# control or retransmission: the receiving side posts every receive before
# the start, and a lost packet fails the scenario (the waiting side gives
# up). Sizes stay within a few packets, which the VM (TCG) takes without
# dropping any.
for t in write_bw send_bw; do
    for s in 1 1024 4096; do
        args="-x 1 -m $MTU -n $ITERS -s $s -c UC"
        vm_server "${t}_uc/s=$s/goroce-client" "has_result $s $ITERS" \
            "ib_${t} -d rxe0 $args" "$P ${t} --bind $HOST_IP -u 18 $args $VM_IP"
        host_server "${t}_uc/s=$s/goroce-server" "has_result $s $ITERS" \
            "$P ${t} --bind $HOST_IP -u 18 $args" "ib_${t} -d rxe0 $args $HOST_IP"
    done
done
for t in write_lat send_lat; do
    args="-x 1 -m $MTU -n $ITERS -s 64 -c UC"
    vm_server "${t}_uc/s=64/goroce-client" "has_result 64 $ITERS" \
        "ib_${t} -d rxe0 $args" "$P ${t} --bind $HOST_IP -u 18 $args $VM_IP"
    host_server "${t}_uc/s=64/goroce-server" "has_result 64 $ITERS" \
        "$P ${t} --bind $HOST_IP -u 18 $args" "ib_${t} -d rxe0 $args $HOST_IP"
done
for s in 1 1024; do
    args="-x 1 -m $MTU -n $ITERS -s $s -c UD"
    vm_server "send_bw_ud/s=$s/goroce-client" "has_result $s $ITERS" \
        "ib_send_bw -d rxe0 $args" "$P send_bw --bind $HOST_IP -u 18 $args $VM_IP"
    host_server "send_bw_ud/s=$s/goroce-server" "has_result $s $ITERS" \
        "$P send_bw --bind $HOST_IP -u 18 $args" "ib_send_bw -d rxe0 $args $HOST_IP"
done
args="-x 1 -m $MTU -n $ITERS -s 64 -c UD"
vm_server "send_lat_ud/s=64/goroce-client" "has_result 64 $ITERS" \
    "ib_send_lat -d rxe0 $args" "$P send_lat --bind $HOST_IP -u 18 $args $VM_IP"
host_server "send_lat_ud/s=64/goroce-server" "has_result 64 $ITERS" \
    "$P send_lat --bind $HOST_IP -u 18 $args" "ib_send_lat -d rxe0 $args $HOST_IP"

# ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong: as ibv_rc_pingpong,
# data checked on both sides. UC: 4096 bytes is four packets, which UC
# reassembles with no retransmission; UD: at most the MTU (1024), no -m;
# SRQ: four RC QPs receiving from one shared receive queue. With -q 4 both
# tools may post up to three sends more than the peer waits for;
# goroce-srq-pingpong keeps its QPs open for half a second after the run
# so that rxe's extra sends are acknowledged, not retried into destroyed
# QPs (completer_retry_err).
for v in uc ud srq; do
    case $v in
    uc) sizes="1 4096" opts="-m $MTU" ;;
    ud) sizes="1 1024" opts="" ;;
    srq) sizes="1 4096" opts="-m $MTU -q 4" ;;
    esac
    for s in $sizes; do
        args="-g 1 $opts -n $PP_ITERS -s $s -c"
        vm_server "${v}_pingpong/s=$s/goroce-client" "has_pingpong $PP_ITERS" \
            "ibv_${v}_pingpong -d rxe0 $args" "$BIN/goroce-$v-pingpong --bind $HOST_IP $args $VM_IP"
        host_server "${v}_pingpong/s=$s/goroce-server" "has_pingpong $PP_ITERS" \
            "$BIN/goroce-$v-pingpong --bind $HOST_IP $args" "ibv_${v}_pingpong -d rxe0 $args $HOST_IP"
    done
done

# rdma_cm: rping and perftest -R connect through the CM (MADs to QP 1), no
# TCP at all. The servers are awaited by their rdma_cm listener (the VM's
# in `rdma res show cm_id`, goroce's by the line it prints once listening).

# has_rping N FILE: ping N-1's data, validated (-V), printed by -v
has_rping() {
    grep -q "ping data: rdma-ping-$(($1 - 1)): " "$2"
}

# rping: goroce-rping against rping, -V, sizes from rping's minimum (26)
# to several packets (5000 > MTU 1024), both roles
CM_PORT=7174 CM_READY="rdma_listen on"
for s in 26 64 5000; do
    args="-C 10 -V -v -S $s"
    vm_server "rping/s=$s/goroce-client" "has_rping 10" \
        "rping -s -a $VM_IP -V -v -S $s" "$R -c -a $VM_IP -I $HOST_IP $args"
    host_server "rping/s=$s/goroce-server" "has_rping 10" \
        "$R -s -d -a $HOST_IP -V -v -S $s" "rping -c -a $HOST_IP $args"
done

# perftest -R: the exchanges on an rdma_cm control connection, the data
# QPs connected by the CM. perftest -R busy-polls that connection in the
# VM, which slows rxe on the VM's emulated CPUs: goroce's requests wait
# up to 1 s (-u 18) for an ACK rather than perftest's 67 ms.
CM_PORT=18515 CM_READY="Waiting for client to connect"
for t in write read send; do
    for s in 1024 65536; do
        args="-R -n $ITERS -s $s"
        vm_server "${t}_bw_rdma_cm/s=$s/goroce-client" "has_result $s $ITERS" \
            "ib_${t}_bw -d rxe0 $args" "$P ${t}_bw --bind $HOST_IP -u 18 $args $VM_IP"
        host_server "${t}_bw_rdma_cm/s=$s/goroce-server" "has_result $s $ITERS" \
            "$P ${t}_bw --bind $HOST_IP -u 18 $args" "ib_${t}_bw -d rxe0 $args $HOST_IP"
    done
done
args="-R -n $ITERS -s 64"
vm_server "write_lat_rdma_cm/s=64/goroce-client" "has_result 64 $ITERS" \
    "ib_write_lat -d rxe0 $args" "$P write_lat --bind $HOST_IP -u 18 $args $VM_IP"
host_server "write_lat_rdma_cm/s=64/goroce-server" "has_result 64 $ITERS" \
    "$P write_lat --bind $HOST_IP -u 18 $args" "ib_write_lat -d rxe0 $args $HOST_IP"

# rsockets: goroce-rstream (package rsocket) against librdmacm's rstream,
# both roles: the stream over rdma_cm, rs_conn_data in the REQ and REP,
# data and credits as RDMA WRITE WITH IMMEDIATE. rstream's custom test,
# -T v: each side checks every byte it receives against its counter and
# exits 1 on a mismatch; both print the "custom" line of the size and
# count. rstream's default buffers (SO_SNDBUF/SO_RCVBUF 512 KiB, doubled
# by rsockets), and -B 8192 (16 KiB buffers: every transfer crosses the
# buffer's wrap and waits for credits).
# has_rstream SIZE XFERS FILE: the result line of the custom test
has_rstream() {
    grep -Eq "^custom +$1 +$2 +1 +[0-9]" "$3"
}
CM_PORT=7471 CM_READY="name "
for t in "64 64 200" "1000 1000 200" "65536 64k 20" "1048576 1m 5" "3145729 3m 2" "100000/B=8192 97k 20"; do
    read -r sz shown xfers <<<"$t"
    s=${sz%%/*} extra=
    [ "$sz" = "$s" ] || extra="-B ${sz#*/B=}"
    args="-S $s -C $xfers -T v $extra"
    vm_server "rstream/s=$sz/goroce-client" "has_rstream $shown $xfers" \
        "rstream -b $VM_IP $args" "$RS -s $VM_IP -b $HOST_IP $args"
    host_server "rstream/s=$sz/goroce-server" "has_rstream $shown $xfers" \
        "$RS -b $HOST_IP $args" "rstream -s $HOST_IP -b $VM_IP $args"
done
# Keepalive (-k 1, SO_KEEPALIVE with TCP_KEEPIDLE 1 s): both sides post a
# zero-length RDMA WRITE without immediate data every second, which the
# peer's device acknowledges and its program never sees; 500 round trips
# of 1000 bytes take a second or more here (up to 10 s on a loaded host),
# a probe or more each way.
has_rstream_iters() {
    grep -Eq "^custom +$1 +$2 +$3 +[0-9]" "$4"
}
args="-S 1000 -C 1 -I 500 -T v -k 1"
vm_server "rstream/k=1/goroce-client" "has_rstream_iters 1000 1 500" \
    "rstream -b $VM_IP $args" "$RS -s $VM_IP -b $HOST_IP $args"
host_server "rstream/k=1/goroce-server" "has_rstream_iters 1000 1 500" \
    "$RS -b $HOST_IP $args" "rstream -s $HOST_IP -b $VM_IP $args"

# riostream: goroce-riostream (rsocket's iomap) against librdmacm's
# riostream, both roles: each side maps its buffer (riomap: an rs_iomap
# written into the peer's iomap table after its target SGL ring, with
# RS_OP_IOMAP_SGL), then writes into the peer's (riowrite: RDMA WRITEs
# without immediate data), which watches the last byte for the marker.
# -T v: each side checks the bytes of each last transfer and exits
# non-zero on a mismatch. 200 round trips of 64 bytes, transfers of 1000
# bytes to 3 MiB + 1, and 16 KiB socket buffers (-B 8192), where every
# transfer waits for send buffer.
for t in "64/I=200 64 1 200" "1000 1000 100 1" "65536 64k 20 1" "1048576 1m 5 1" "3145729 3m 2 1" "100000/B=8192 97k 20 1"; do
    read -r sz shown xfers iters <<<"$t"
    s=${sz%%/*} extra=
    case $sz in
    */B=*) extra="-B ${sz#*/B=}" ;;
    */I=*) extra="-I ${sz#*/I=}" ;;
    esac
    args="-S $s -C $xfers -T v $extra"
    vm_server "riostream/s=$sz/goroce-client" "has_rstream_iters $shown $xfers $iters" \
        "riostream -b $VM_IP $args" "$RIS -s $VM_IP -b $HOST_IP $args"
    host_server "riostream/s=$sz/goroce-server" "has_rstream_iters $shown $xfers $iters" \
        "$RIS -b $HOST_IP $args" "riostream -s $HOST_IP -b $VM_IP $args"
done
CM_PORT= CM_READY=

# A connect to a port nobody listens on is refused with REJ reason 8
# ("invalid service ID", as the kernel answers). Each side's server listens
# on 7174 and serves the second client, after the first, to 7175, is
# refused: rping reports the REJ as RDMA_CM_EVENT_REJECTED with status 8,
# goroce-rping as cm.ErrNoListener.
# Each log shows its side's part: a server served the second client, a
# client was refused with reason 8, then served.
refused_or_served() {
    grep -q "^server ping data: rdma-ping-0: " "$1" ||
        { grep -Eq "invalid service ID|RDMA_CM_EVENT_REJECTED, error 8" "$1" && has_rping 1 "$1"; }
}
cat >"$BIN/goroce-rping-refused" <<EOS
#!/bin/sh
"$R" -c -a $VM_IP -I $HOST_IP -p 7175 -C 1
"$R" -c -a $VM_IP -I $HOST_IP -C 1 -v
EOS
chmod +x "$BIN/goroce-rping-refused"
CM_PORT=7174 CM_READY="rdma_listen on"
vm_server "rping/unused-port/goroce-client" refused_or_served \
    "rping -s -a $VM_IP -v" \
    "$BIN/goroce-rping-refused"
host_server "rping/unused-port/goroce-server" refused_or_served \
    "$R -s -d -a $HOST_IP -v" \
    "rping -c -a $HOST_IP -p 7175 -C 1; rping -c -a $HOST_IP -C 1 -v"
CM_PORT= CM_READY=

# The software NIC behind libgoroce.so, inside the namespace, bound to the
# host's address there (goroce0); its socket name lives in the namespace.
# It holds 10.99.0.1's RoCEv2 port from its start, so it starts after the
# scenarios of goroce's own tools, which bind that address themselves.
NIC_SOCKET=@goroce-nic-interop-$$
start_nic() {
    ip netns exec "$NS" "$BIN/goroce-exec" --daemon --bind "$HOST_IP" --socket "$NIC_SOCKET" \
        --idle-exit 0 >"$LOGS/goroce-nic.log" 2>&1 &
    NIC_PID=$!
    for _ in $(seq 1 100); do
        grep -q 'listening on' "$LOGS/goroce-nic.log" && break
        kill -0 "$NIC_PID" 2>/dev/null || break
        sleep 0.1
    done
    grep -q 'listening on' "$LOGS/goroce-nic.log" || die "goroce-nic did not start: $(cat "$LOGS/goroce-nic.log")"
}

start_nic

# libgoroce: the same tools on both ends, goroce's through goroce-exec
# (libgoroce.so preloaded, the daemon above); RC, GID index 1, both roles.
# As with -R above, goroce's perftest waits up to 1 s (-u 18) for rxe's
# ACKs: rxe on the VM's emulated CPUs, on a loaded host, took longer than
# perftest's 67 ms for 64 KiB WRITEs, and goroce's go-back-N resends then
# show up as rxe duplicates (the counters check) and can stall the run.
GX="env GOROCE_NIC_SOCKET=$NIC_SOCKET GOROCE_LIB=$BIN/libgoroce.so $BIN/goroce-exec --bind $HOST_IP --socket $NIC_SOCKET"
for t in write read send; do
    for s in 1025 65536; do
        args="-x 1 -m $MTU -n $ITERS -s $s"
        vm_server "libgoroce/ib_${t}_bw/s=$s/goroce-client" "has_result $s $ITERS" \
            "ib_${t}_bw -d rxe0 $args" "$GX ib_${t}_bw -d goroce0 -u 18 $args $VM_IP"
        host_server "libgoroce/ib_${t}_bw/s=$s/goroce-server" "has_result $s $ITERS" \
            "$GX ib_${t}_bw -d goroce0 -u 18 $args" "ib_${t}_bw -d rxe0 $args $HOST_IP"
    done
done
args="-x 1 -m $MTU -n $ITERS -s 64"
vm_server "libgoroce/ib_write_lat/s=64/goroce-client" "has_result 64 $ITERS" \
    "ib_write_lat -d rxe0 $args" "$GX ib_write_lat -d goroce0 -u 18 $args $VM_IP"
host_server "libgoroce/ib_write_lat/s=64/goroce-server" "has_result 64 $ITERS" \
    "$GX ib_write_lat -d goroce0 -u 18 $args" "ib_write_lat -d rxe0 $args $HOST_IP"
args="-g 1 -m $MTU -n $PP_ITERS -s 4096 -c"
vm_server "libgoroce/ibv_rc_pingpong/s=4096/goroce-client" "has_pingpong $PP_ITERS" \
    "ibv_rc_pingpong -d rxe0 $args" "$GX ibv_rc_pingpong -d goroce0 $args $VM_IP"
host_server "libgoroce/ibv_rc_pingpong/s=4096/goroce-server" "has_pingpong $PP_ITERS" \
    "$GX ibv_rc_pingpong -d goroce0 $args" "ibv_rc_pingpong -d rxe0 $args $HOST_IP"

# librdmacm: rdmacm-utils' own tools on both ends, goroce's through
# goroce-exec (librdmacm's calls served by the daemon's cm); both roles.
# goroce's servers log "rdma_listen on port N" with GOROCE_DEBUG=1.
has_return0() { grep -q "return status 0" "$1"; }
has_end0() { grep -q ": end 0" "$1"; }
GXD="env GOROCE_DEBUG=1 $GX"
CM_PORT=7471 CM_READY="rdma_listen on"
vm_server "librdmacm/ucmatose/c=4/goroce-client" has_return0 \
    "ucmatose -b $VM_IP -c 4 -C 10" "$GX ucmatose -s $VM_IP -b $HOST_IP -c 4 -C 10"
host_server "librdmacm/ucmatose/c=4/goroce-server" has_return0 \
    "$GXD ucmatose -b $HOST_IP -c 4 -C 10" "ucmatose -s $HOST_IP -b $VM_IP -c 4 -C 10"
vm_server "librdmacm/rdma_server/goroce-client" has_end0 \
    "rdma_server -s $VM_IP" "$GX rdma_client -s $VM_IP"
host_server "librdmacm/rdma_server/goroce-server" has_end0 \
    "$GXD rdma_server -s $HOST_IP" "rdma_client -s $HOST_IP"
# udaddy: UD through SIDR; it serves on 7174 (its -p is the port space).
CM_PORT=7174
vm_server "librdmacm/udaddy/c=4/goroce-client" has_return0 \
    "udaddy -b $VM_IP -c 4 -C 10" "$GX udaddy -s $VM_IP -b $HOST_IP -c 4 -C 10"
host_server "librdmacm/udaddy/c=4/goroce-server" has_return0 \
    "$GXD udaddy -b $HOST_IP -c 4 -C 10" "udaddy -s $HOST_IP -b $VM_IP -c 4 -C 10"
CM_PORT= CM_READY=

# ----------------------------------------------------------------------------- checks
sleep 0.5 # the last ACKs
kill -INT "$TCPDUMP_PID" 2>/dev/null
wait "$TCPDUMP_PID"
TCPDUMP_PID=
grep -E 'captured|dropped' "$LOGS/tcpdump.log" | sed 's/^/[tcpdump] /' >&2
snapshot "$WORK/counters.1" || die "cannot read rxe counters: $(cat "$WORK/counters.1.err")"

echo "rxe0 hw_counters (before -> after):"
awk -F: 'NR == FNR { old[$1] = $2; next } $1 != "lifespan" {
        printf "    %-24s %10d -> %d\n", $1, old[$1], $2 }' "$WORK/counters.0" "$WORK/counters.1"

# The capture, decoded once for the checks below.
"$BIN/goroce-dump" --check --mtu "$MTU" "$CAP" >"$LOGS/goroce-dump.log" 2>&1
dump_rc=$?

# rxe counters: no error counter grew. completer_retry_err is the exception
# when the capture explains it: rxe arms its retransmission timer when it
# sends into an idle timer and does not push it back on later ACKs, so in a
# run longer than the timeout (ibv_rc_pingpong: 67 ms) it may fire just after
# a new request went out and resend that request although goroce has
# answered everything before it. That is rxe's doing. So is a resend of a
# request goroce answered only after it when goroce sent nothing at all on
# the connection in between: goroce's process did not run for longer than
# the 67 ms timeout (the host, two CPUs shared with the VM's emulated ones,
# was busy; seen with goroce silent for 98 ms while br0 held rxe's
# requests), and the protocol recovered. A resend of a request goroce had
# not answered although it was sending on that connection, or never
# answered, is a goroce bug: it withheld or lost an acknowledgement.
awk -v rxe="$VM_IP" "$RETRANSMISSIONS_AWK" "$LOGS/goroce-dump.log" \
    >"$WORK/retransmissions.count" 2>"$WORK/retransmissions.txt"
read -r spurious stalled unasked late <"$WORK/retransmissions.count"
echo "rxe retransmissions in the capture: $spurious of requests goroce had answered, $stalled answered after goroce stalled," \
    "$unasked that asked for no ACK and were answered later, $late other"
# duplicate_request is the same exception the other way: the VM (TCG, on a
# shared host) sometimes stalls for longer than the 67 ms timeout, goroce's
# timer fires and it resends what rxe then finds it already has (with the
# extra copies of the head goroce sends in a retry round). That is the
# protocol working; a resend before the timer, or of a request rxe had
# answered, is a goroce bug.
awk -v rxe="$VM_IP" "$GOROCE_RETRANSMISSIONS_AWK" "$LOGS/goroce-dump.log" \
    >"$WORK/goroce-retransmissions.count" 2>>"$WORK/retransmissions.txt"
read -r timely early <"$WORK/goroce-retransmissions.count"
echo "goroce retransmissions in the capture: $timely after its timer with no answer from rxe, $early other"
errs=$(counter_deltas "$WORK/counters.0" "$WORK/counters.1" |
    awk -v errs="$ERROR_COUNTERS" -v excused=$((late == 0 && spurious + stalled + unasked > 0)) -v gexcused=$((early == 0 && timely > 0)) '
        BEGIN { split(errs, e); for (i in e) bad[e[i]] = 1 }
        $1 == "completer_retry_err" && excused { next }
        $1 == "duplicate_request" && gexcused { next }
        $1 in bad && $2 > 0 { print $1 " +" $2 }')
if [ -z "$errs" ]; then
    pass "rxe counters"
else
    echo "$errs" >"$WORK/counter-errors.total"
    fail "rxe counters" "$WORK/counter-errors.total" "$WORK/counter-errors" "$WORK/retransmissions.txt"
fi

# rxe counters: packets: rxe counted every RoCEv2 packet on the wire, so it
# dropped none of goroce's (a bad ICRC is dropped without a counter). One
# exception per connection: goroce's ACK of the peer tool's last request
# races that tool's teardown (rping's server destroys its QP right after
# posting its last SEND, without waiting for the ACK), and rxe counts no
# packet for a QP that is gone. So the uncounted packets may be at most
# the connections whose last packet from goroce is an ACKNOWLEDGE (seen in
# the goroce-rping scenarios: ACKs sent 0.2 ms after rxe's final SEND).
captured=$(tshark -r "$CAP" -Y 'udp.dstport == 4791' -T fields -e frame.number 2>/dev/null | wc -l)
rxe_pkts=$(counter_deltas "$WORK/counters.0" "$WORK/counters.1" |
    awk '$1 == "sent_pkts" || $1 == "rcvd_pkts" { n += $2 } END { print n + 0 }')
final_acks=$(tshark -r "$CAP" -Y "udp.dstport == 4791 && ip.src == $HOST_IP && infiniband" \
    -T fields -e infiniband.bth.destqp -e infiniband.bth.opcode 2>/dev/null |
    awk '{ last[$1] = $2 } END { n = 0; for (q in last) if (last[q] == 17) n++; print n }')
uncounted=$((captured - rxe_pkts))
echo "captured RoCEv2 packets: $captured; rxe sent_pkts+rcvd_pkts: $rxe_pkts;" \
    "connections ending with goroce's ACK: $final_acks"
if [ "$captured" -gt 0 ] && [ "$uncounted" -ge 0 ] && [ "$uncounted" -le "$final_acks" ]; then
    [ "$uncounted" = 0 ] || echo "($uncounted final ACKs reached a QP its tool had destroyed)"
    pass "rxe counters: packets"
else
    {
        echo "captured $captured RoCEv2 packets, rxe counted $rxe_pkts ($final_acks connections end with goroce's ACK)"
        grep 'dropped by kernel' "$LOGS/tcpdump.log"
        [ "$FAILED" = 0 ] || echo "(after a failed scenario this follows: rxe does not count" \
            "packets that reach a QP its tool destroyed when it stopped)"
    } >"$WORK/packets.txt"
    fail "rxe counters: packets" "$WORK/packets.txt"
fi

# capture: goroce-dump: every packet parses, payloads fit the MTU, ICRC ok
summary=$(tail -n 1 "$LOGS/goroce-dump.log")
echo "goroce-dump: $summary"
if [ $dump_rc = 0 ] && [[ $summary =~ ^check:\ ([0-9]+)\ RoCEv2 ]] && [ "${BASH_REMATCH[1]}" -gt 0 ]; then
    pass "capture: goroce-dump --check"
else
    grep -E 'malformed|BAD' "$LOGS/goroce-dump.log" | head -n 20 >"$WORK/goroce-dump.bad"
    fail "capture: goroce-dump --check" "$WORK/goroce-dump.bad" "$LOGS/goroce-dump.log"
fi

# capture: tshark decodes every UDP 4791 packet as InfiniBand (4.0 does it by
# default, "RRoCE") and finds no malformed header. tshark also guesses at
# what the payload of a SEND or RDMA WRITE carries (RPC over RDMA, an
# EtherType, ...) and reports a malformed packet when the guess fails; the
# payload is perftest's buffer, so such a frame, whose last decoded layer is
# the guessed protocol rather than infiniband, is counted apart.
ib=$(tshark -r "$CAP" -Y 'infiniband' -T fields -e frame.number 2>/dev/null | wc -l)
tshark -r "$CAP" -Y '_ws.malformed' -T fields -e frame.number -e frame.protocols \
    >"$WORK/tshark.malformed" 2>"$LOGS/tshark.err"
# tshark warns about running as root; anything else on stderr is a problem
sed -i '/^Running as user "root"/d' "$LOGS/tshark.err"
malformed=$(awk '$2 !~ /infiniband/ || $2 ~ /:infiniband$/' "$WORK/tshark.malformed" | wc -l)
guessed=$(awk '$2 ~ /:infiniband:/' "$WORK/tshark.malformed" | wc -l)
echo "tshark: $ib InfiniBand packets of $captured, $malformed malformed" \
    "($guessed more with a payload tshark misread as another protocol)"
if [ "$captured" -gt 0 ] && [ "$ib" = "$captured" ] && [ "$malformed" = 0 ] && [ ! -s "$LOGS/tshark.err" ]; then
    pass "capture: tshark"
else
    awk '$2 !~ /infiniband/ || $2 ~ /:infiniband$/ { print "frame " $1 ": " $2 }' \
        "$WORK/tshark.malformed" >"$WORK/tshark.bad"
    tshark -r "$CAP" -Y '!infiniband' 2>/dev/null | head -n 20 >>"$WORK/tshark.bad"
    fail "capture: tshark" "$WORK/tshark.bad" "$LOGS/tshark.err"
fi

# Tear down before the summary, so that its line is the last of the run.
cleanup
log "total $((SECONDS - T_START)) s"
for n in "${FAILED_NAMES[@]}"; do echo "failed: $n"; done
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
