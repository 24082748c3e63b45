#!/usr/bin/env bash
# loss.sh - goroce's reliable transport on a lossy path.
#
# Two network namespaces, goroce-la (10.98.0.1/24) and goroce-lb
# (10.98.0.2/24), joined by a veth pair (MTU 1500, so the tests use path
# MTU 1024). In each namespace an iptables rule in INPUT drops UDP
# packets to port 4791 (RoCEv2) at random with probability P, so requests
# and responses (ACKs, NAKs, READ responses, atomic ACKs) are both lost.
# The out-of-band TCP exchange is not touched. UDP segmentation offload
# is turned off on the veth pair (ethtool), so that a goroce-perf sending
# with UDP GSO has its batches split into single packets before they
# cross the pair: the rule then drops RoCE packets, not whole batches.
#
# For P in $LOSS and TEST in $TESTS it runs goroce-perf TEST --check --json,
# the server in goroce-la, the client in goroce-lb, and checks:
#
#   - both sides exit 0 within $TIMEOUT seconds (no hang, no RETRY_EXC_ERR
#     or other completion error: goroce-perf fails on any unsuccessful
#     completion);
#   - every side's JSON result reports the requested iteration count;
#   - the side(s) holding the data report "check": "passed" (write/send:
#     the server; read: the client; atomic: both, the client checking the
#     values the atomics returned and the server the target, which holds
#     exactly the number of atomics only if each executed exactly once),
#     and no side reports "off".
#
# goroce-perf sets perftest's QP attributes (timeout 14 = 67 ms,
# retry_cnt 7, rnr_retry 7) and has no flags to change them; this script
# does not change them either: a run that exhausts its retries fails.
#
# Output: one line per run,
#   PASS loss=5%  write_bw  <MB/s>  n=<iterations> <seconds>s dropped b->a/a->b: <pkts>/<pkts>
# or FAIL with the reason and the last lines of both sides' output, then
# "N passed, M failed". Exit status 0 only when nothing failed. The
# namespaces (and with them the veth pair and the rules) are deleted and
# the processes killed on exit, also when interrupted.
#
# Usage (as root, from anywhere): test/faults/loss.sh
# Environment:
#   LOSS       drop probabilities (default "0 0.01 0.05 0.20"; 0 = baseline)
#   TESTS      goroce-perf tests (default "write_bw read_bw send_bw atomic_bw")
#   SIZE       message size of write/read/send (default 65536)
#   ITERS      iterations of write/read/send (default 1000)
#   ATOMIC_ITERS  iterations of atomic_bw (default 5000)
#   HIGH_LOSS  from this drop probability on, use the HIGH_* counts
#              (default 0.1): go-back-N with a 128-PSN window on a 20%
#              lossy path moves ~1-5 MB/s and ~200 atomics/s, so the
#              default counts would need minutes per run
#   HIGH_ITERS, HIGH_ATOMIC_ITERS  those counts (default 200 and 2000)
# With the defaults the whole script takes one to two minutes.
#   TIMEOUT    seconds per run (default 120)
#   PERF_ARGS  extra goroce-perf arguments for both sides, e.g.
#              --selective-repeat (default none: IBTA go-back-N)
#   CAPTURE    when set, tcpdump UDP 4791 in goroce-la into $OUT per run
#   OUT        keep the logs (and captures) in this directory (default: a
#              temporary directory, kept only when a run fails)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NS_A=goroce-la
NS_B=goroce-lb
IP_A=10.98.0.1
IP_B=10.98.0.2
MTU=1024
LOSS=${LOSS:-0 0.01 0.05 0.20}
TESTS=${TESTS:-write_bw read_bw send_bw atomic_bw}
SIZE=${SIZE:-65536}
ITERS=${ITERS:-1000}
ATOMIC_ITERS=${ATOMIC_ITERS:-5000}
HIGH_LOSS=${HIGH_LOSS:-0.1}
HIGH_ITERS=${HIGH_ITERS:-200}
HIGH_ATOMIC_ITERS=${HIGH_ATOMIC_ITERS:-2000}
TIMEOUT=${TIMEOUT:-120}
CAPTURE=${CAPTURE:-}
OOB_PORT=18515
ROCE_PORT=4791
export PATH=$PATH:/usr/local/go/bin

if [[ $(id -u) != 0 ]]; then
	echo "loss.sh: must run as root (namespaces, iptables)" >&2
	exit 2
fi

keep_out=
if [[ -n ${OUT:-} ]]; then
	mkdir -p "$OUT" || exit 2
	keep_out=1
else
	OUT=$(mktemp -d /tmp/goroce-loss.XXXXXX) || exit 2
fi
BIN=$(mktemp -d /tmp/goroce-loss-bin.XXXXXX) || exit 2

pids=()
failed=0
passed=0

cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null
	done
	# Whatever still runs in the namespaces was started here (timeout's
	# goroce-perf child once timeout itself is gone).
	for p in $(ip netns pids "$NS_A" 2>/dev/null) $(ip netns pids "$NS_B" 2>/dev/null); do
		kill -KILL "$p" 2>/dev/null
	done
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
	rm -rf "$BIN"
	if [[ -z $keep_out && $failed == 0 ]]; then
		rm -rf "$OUT"
	else
		echo "logs kept in $OUT"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

need() { # need COMMAND DEBIAN-PACKAGE
	command -v "$1" >/dev/null && return
	echo "installing $2" >&2
	# On a fresh machine the package lists may be empty: update once.
	DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >"$OUT/apt-$2.log" 2>&1 ||
		{ apt-get update >>"$OUT/apt-$2.log" 2>&1 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >>"$OUT/apt-$2.log" 2>&1; } ||
		{ echo "loss.sh: cannot install $2 (see $OUT/apt-$2.log)" >&2; exit 2; }
}
need iptables iptables
need jq jq
need ethtool ethtool
[[ -n $CAPTURE ]] && need tcpdump tcpdump

in_a() { ip netns exec "$NS_A" "$@"; }
in_b() { ip netns exec "$NS_B" "$@"; }

setup_net() {
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
	ip netns add "$NS_A" && ip netns add "$NS_B" &&
		ip link add veth-la netns "$NS_A" type veth peer name veth-lb netns "$NS_B" &&
		in_a ip addr add "$IP_A/24" dev veth-la && in_b ip addr add "$IP_B/24" dev veth-lb &&
		in_a ethtool -K veth-la tx-udp-segmentation off >/dev/null &&
		in_b ethtool -K veth-lb tx-udp-segmentation off >/dev/null &&
		in_a ip link set veth-la mtu 1500 up && in_b ip link set veth-lb mtu 1500 up &&
		in_a ip link set lo up && in_b ip link set lo up
}

# set_loss P: replace the drop rule of both namespaces (none for P = 0)
# and zero the counters.
set_loss() {
	local ns
	for ns in "$NS_A" "$NS_B"; do
		ip netns exec "$ns" iptables -F INPUT || return 1
		if [[ $1 != 0 ]]; then
			ip netns exec "$ns" iptables -A INPUT -p udp --dport "$ROCE_PORT" \
				-m statistic --mode random --probability "$1" -j DROP || return 1
		fi
		ip netns exec "$ns" iptables -Z INPUT || return 1
	done
}

# dropped NS: packets the drop rule of NS discarded since set_loss.
dropped() {
	ip netns exec "$1" iptables -L INPUT -v -n -x |
		awk '$3 == "DROP" { n += $1 } END { print n + 0 }'
}

wait_listen() { # wait_listen PID: until the server listens (or dies)
	local i
	for ((i = 0; i < 100; i++)); do
		kill -0 "$1" 2>/dev/null || return 1
		in_a ss -Hltn "sport = :$OOB_PORT" | grep -q . && return 0
		sleep 0.1
	done
	return 1
}

# checks SIDE JSONFILE ITERS MUST_PASS: the side's result lines carry the
# iteration count and an acceptable data check. Prints a reason on failure.
checks() {
	local side=$1 file=$2 iters=$3 must=$4 n bad
	n=$(jq -s 'length' "$file" 2>/dev/null) || { echo "$side: output is not JSON"; return 1; }
	if [[ $n == 0 ]]; then
		echo "$side: no result line"
		return 1
	fi
	bad=$(jq -r --argjson it "$iters" 'select(.iterations != $it) | "iterations \(.iterations), want \($it)"' "$file")
	if [[ -n $bad ]]; then
		echo "$side: $bad"
		return 1
	fi
	if [[ $must == 1 ]]; then
		bad=$(jq -r 'select(.check != "passed") | "data check \(.check), want passed"' "$file")
	else
		bad=$(jq -r 'select(.check != "passed" and .check != "peer") | "data check \(.check)"' "$file")
	fi
	if [[ -n $bad ]]; then
		echo "$side: $bad"
		return 1
	fi
}

# run P TEST
run() {
	local p=$1 t=$2 pct name srv cli spid cpid dpid srv_rc cli_rc reason=() bw
	local args=(--check --json -m "$MTU" -p "$OOB_PORT")
	# shellcheck disable=SC2206 # PERF_ARGS is a list of arguments
	args+=(${PERF_ARGS:-})
	local iters=$ITERS atomic_iters=$ATOMIC_ITERS
	if awk -v p="$p" -v h="$HIGH_LOSS" 'BEGIN { exit !(p >= h) }'; then
		iters=$HIGH_ITERS atomic_iters=$HIGH_ATOMIC_ITERS
	fi
	pct=$(awk -v p="$p" 'BEGIN { printf "%g%%", p * 100 }')
	name="loss=$pct $t"
	case $t in
	atomic_*) iters=$atomic_iters ;;
	*) args+=(-s "$SIZE") ;;
	esac
	args+=(-n "$iters")
	local t0=$SECONDS
	local base="$OUT/${t}_p${p}"
	srv=$base.server cli=$base.client
	if ! set_loss "$p"; then
		echo "FAIL $name  (cannot install the iptables rules)"
		failed=$((failed + 1))
		return
	fi
	dpid=
	if [[ -n $CAPTURE ]]; then
		# Started directly (no function, no subshell), so that $! is
		# tcpdump itself: ip netns exec execs it.
		ip netns exec "$NS_A" tcpdump -i veth-la -s 0 -U -w "$base.pcap" \
			udp port "$ROCE_PORT" 2>"$base.tcpdump" &
		dpid=$!
		pids+=("$dpid")
		sleep 0.5
	fi
	ip netns exec "$NS_A" timeout -k 5 "$TIMEOUT" "$BIN/goroce-perf" "$t" "${args[@]}" \
		--bind "$IP_A" >"$srv" 2>"$srv.err" &
	spid=$!
	pids+=("$spid")
	if wait_listen "$spid"; then
		ip netns exec "$NS_B" timeout -k 5 "$TIMEOUT" "$BIN/goroce-perf" "$t" "${args[@]}" \
			--bind "$IP_B" "$IP_A" >"$cli" 2>"$cli.err" &
		cpid=$!
		pids+=("$cpid")
		wait "$cpid"
		cli_rc=$?
	else
		cli_rc=-1
		: >"$cli" >"$cli.err"
		reason+=("server did not listen")
	fi
	wait "$spid"
	srv_rc=$?
	local da db
	da=$(dropped "$NS_A") db=$(dropped "$NS_B")
	if [[ -n $dpid ]]; then
		# TERM, not INT: a non-interactive shell starts background jobs
		# with SIGINT ignored.
		kill -TERM "$dpid" 2>/dev/null
		wait "$dpid" 2>/dev/null
	fi
	pids=()

	case $srv_rc in
	0) ;;
	124 | 137) reason+=("server timed out after ${TIMEOUT}s") ;;
	*) reason+=("server exit $srv_rc") ;;
	esac
	case $cli_rc in
	0 | -1) ;;
	124 | 137) reason+=("client timed out after ${TIMEOUT}s") ;;
	*) reason+=("client exit $cli_rc") ;;
	esac
	if [[ ${#reason[@]} == 0 ]]; then
		local srv_must=0 cli_must=0 r
		case $t in
		write_* | send_*) srv_must=1 ;;
		read_*) cli_must=1 ;;
		atomic_*) srv_must=1 cli_must=1 ;;
		esac
		r=$(checks server "$srv" "$iters" "$srv_must") || reason+=("$r")
		r=$(checks client "$cli" "$iters" "$cli_must") || reason+=("$r")
	fi
	bw=$(jq -rs 'map(select(.side == "client" and .bw_average != null))[0].bw_average // empty' "$cli" 2>/dev/null)
	local drops="dropped b->a/a->b: $da/$db" secs=$((SECONDS - t0))
	if [[ ${#reason[@]} == 0 ]]; then
		printf 'PASS %-10s %-9s %10.2f MB/s  n=%-5s %3ss  %s\n' "loss=$pct" "$t" "${bw:-0}" "$iters" "$secs" "$drops"
		passed=$((passed + 1))
		return
	fi
	printf 'FAIL %-10s %-9s  n=%-5s %3ss  %s\n' "loss=$pct" "$t" "$iters" "$secs" "$drops"
	local r f
	for r in "${reason[@]}"; do
		echo "    $r"
	done
	for f in "$srv.err" "$cli.err"; do
		[[ -s $f ]] && sed 's/^/    '"$(basename "$f")"': /' "$f" | tail -n 5
	done
	failed=$((failed + 1))
}

echo "building goroce-perf" >&2
if ! (cd "$ROOT" && go build -o "$BIN/goroce-perf" ./cmd/goroce-perf); then
	echo "loss.sh: go build failed" >&2
	exit 2
fi
if ! setup_net; then
	echo "loss.sh: cannot create the namespaces" >&2
	exit 2
fi
if ! set_loss 0.5; then
	echo "loss.sh: iptables -m statistic does not work here" >&2
	exit 2
fi

for p in $LOSS; do
	for t in $TESTS; do
		run "$p" "$t"
	done
done
echo "$passed passed, $failed failed in ${SECONDS}s"
[[ $failed == 0 ]]
