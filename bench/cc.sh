#!/usr/bin/env bash
# cc.sh - 1, 2, 4 and 8 goroce flows through one bottleneck, and goroce
# next to TCP, with and without congestion control.
#
# Three network namespaces: goroce-cca (10.97.0.1, the servers) and
# goroce-ccb (10.97.1.2, the clients), each joined by a veth pair of link
# MTU 4200 (path MTU 4096) to the router goroce-ccr, which forwards
# between them and sends towards the servers through a tbf qdisc of rate
# $RATE and queue $LIMIT bytes: the bottleneck the WRITEs cross (ACKs come
# back unshaped). The queue is in another host's qdisc, as a switch's is,
# so a full queue drops packets instead of pushing back on the senders'
# sockets (TCP Small Queues, UDP's ENOBUFS). Segmentation and receive
# offloads are off on every link, so tbf sees single packets. No qdisc
# here marks ECN (this kernel has no red or fq_codel), so DCQCN never
# acts: the congestion control that can act is the RTT window
# (DeviceConfig.CongestionControl.RTT, goroce-perf --rtt-cc).
#
# For each MODE in $MODES ("off": --no-ecn, no congestion control at
# all; "rtt": --rtt-cc --rtt-target $RTT_TARGET):
#   1. write_lat alone through the bottleneck (the unloaded latency);
#   2. for each N in $FLOWS, N write_bw flows of $SIZE-byte WRITEs for
#      $SECS seconds, one goroce-perf pair each (UDP ports 4791, 4793,
#      ...), and 2 s after they start, the same write_lat alongside them;
#   3. one write_bw flow next to one iperf3 TCP stream.
# It prints each flow's MB/s, their sum, Jain's fairness index
# (sum x)^2 / (n sum x^2), and write_lat's p50 and p99 loaded and unloaded.
#
# The RTT target is set for this path, as Swift sets its target for a
# fabric: write_lat's unloaded round trip here is about 130-180 us, so
# the default 200 us keeps the queue to a few packets (the library's
# default, 1 ms, kept a queue of about 0.8 ms here: 4.8x the unloaded
# p99). The write_lat pair runs at nice -10 (LAT_NICE): on a machine of
# 2 cores the 2N processes of the flows otherwise hold the probe off the
# CPU, and the ratio would count that as queueing (with the queue kept
# near empty by a target below the base round trip it still read 3.7x).
#
# Usage (as root, from anywhere): bench/cc.sh
# Environment: RATE (default 400mbit), LIMIT (tbf queue, default 1000000
# bytes), FLOWS (flow counts, default "1 2 4 8"), SECS (default 10), SIZE (default 65536), LAT_ITERS (default
# 3000), RTT_TARGET (microseconds, default 200), LAT_NICE (the probe's
# niceness, default -10; empty for none), MODES (default
# "off rtt"), OUT (keep the logs there; default a temporary directory,
# removed).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NS_A=goroce-cca
NS_B=goroce-ccb
NS_R=goroce-ccr
IP_A=10.97.0.1
IP_RA=10.97.0.254
IP_B=10.97.1.2
IP_RB=10.97.1.254
RATE=${RATE:-400mbit}
LIMIT=${LIMIT:-1000000}
SECS=${SECS:-10}
SIZE=${SIZE:-65536}
LAT_ITERS=${LAT_ITERS:-3000}
RTT_TARGET=${RTT_TARGET:-200}
LAT_NICE=${LAT_NICE--10}
MODES=${MODES:-off rtt}
FLOWS=${FLOWS:-1 2 4 8}
IPERF_PORT=15273
export PATH=$PATH:/usr/local/go/bin

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_require_root cc.sh 'namespaces, tc'
bench_dirs cc
pids=()

cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	bench_netns_down "$NS_A" "$NS_B" "$NS_R"
	bench_dirs_remove
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for c in jq ethtool tc iperf3; do
	command -v "$c" >/dev/null || { echo "cc.sh: needs $c" >&2; exit 2; }
done

in_a() { ip netns exec "$NS_A" "$@"; }
in_b() { ip netns exec "$NS_B" "$@"; }
in_r() { ip netns exec "$NS_R" "$@"; }

setup_net() {
	local ns
	for ns in "$NS_A" "$NS_B" "$NS_R"; do
		ip netns del "$ns" 2>/dev/null
		ip netns add "$ns" || return 1
		ip netns exec "$ns" ip link set lo up || return 1
	done
	ip link add veth-cca netns "$NS_A" type veth peer name veth-ccra netns "$NS_R" &&
		ip link add veth-ccb netns "$NS_B" type veth peer name veth-ccrb netns "$NS_R" &&
		in_a ip addr add "$IP_A/24" dev veth-cca && in_b ip addr add "$IP_B/24" dev veth-ccb &&
		in_r ip addr add "$IP_RA/24" dev veth-ccra && in_r ip addr add "$IP_RB/24" dev veth-ccrb || return 1
	local pair
	for pair in "$NS_A veth-cca" "$NS_B veth-ccb" "$NS_R veth-ccra" "$NS_R veth-ccrb"; do
		set -- $pair
		ip netns exec "$1" ethtool -K "$2" tx-udp-segmentation off tso off gso off gro off >/dev/null &&
			ip netns exec "$1" ip link set "$2" mtu 4200 up || return 1
	done
	in_r sysctl -qw net.ipv4.ip_forward=1 &&
		in_a ip route add default via "$IP_RA" && in_b ip route add default via "$IP_RB" &&
		in_r tc qdisc add dev veth-ccra root tbf rate "$RATE" burst 32kb limit "$LIMIT"
}

wait_listen() { # wait_listen PID PORT
	local i
	for ((i = 0; i < 100; i++)); do
		kill -0 "$1" 2>/dev/null || return 1
		in_a ss -Hltn "sport = :$2" | grep -q . && return 0
		sleep 0.1
	done
	return 1
}

# start NAME K TEST ARGS...: a goroce-perf TEST pair on UDP port 4791+2K
# and TCP port 18515+K; sets cpid to the client's PID.
start() {
	local name=$1 k=$2 t=$3
	shift 3
	local args=("$t" --json -m 4096 -p $((18515 + k)) --udp-port $((4791 + 2 * k)) "$@")
	local pri=()
	[[ $t == write_lat && -n $LAT_NICE ]] && pri=(nice -n "$LAT_NICE")
	in_a "${pri[@]}" timeout -k 5 $((SECS + 120)) "$BIN/goroce-perf" "${args[@]}" --bind "$IP_A" \
		>"$OUT/$name.server" 2>"$OUT/$name.server.err" &
	pids+=($!)
	wait_listen $! $((18515 + k)) || { echo "cc.sh: $name: server did not listen" >&2; return 1; }
	in_b "${pri[@]}" timeout -k 5 $((SECS + 120)) "$BIN/goroce-perf" "${args[@]}" --bind "$IP_B" "$IP_A" \
		>"$OUT/$name.client" 2>"$OUT/$name.client.err" &
	cpid=$!
	pids+=("$cpid")
}

lat() { # lat FILE: "p50 p99" of a write_lat client's JSON
	jq -rs 'map(select(.side == "client"))[0] | "\(.t_typical_usec) \(.p99_usec)"' "$1" 2>/dev/null
}

# flows MODE N CCARGS...: N write_bw flows and write_lat alongside them,
# 2 s after they start; prints one report line.
flows() {
	local mode=$1 n=$2
	shift 2
	local k p cpids=()
	for ((k = 0; k < n; k++)); do
		start "$mode-n$n-bw$k" "$k" write_bw -s "$SIZE" -D "$SECS" "$@" || return 1
		cpids+=("$cpid")
	done
	sleep 2
	start "$mode-n$n-lat" 9 write_lat -s 64 -n "$LAT_ITERS" "$@" || return 1
	cpids+=("$cpid")
	for p in "${cpids[@]}"; do
		wait "$p"
	done
	wait
	pids=()
	local bws=() b
	for ((k = 0; k < n; k++)); do
		b=$(jq -rs 'map(select(.side == "client" and .bw_average != null))[0].bw_average // 0' "$OUT/$mode-n$n-bw$k.client" 2>/dev/null)
		bws+=("${b:-0}")
	done
	echo "${bws[*]} | ${lat0:-? ?} | $(lat "$OUT/$mode-n$n-lat.client")" | awk -v mode="$mode" -v n="$n" '{
		s = 0; s2 = 0; list = ""
		for (i = 1; i <= n; i++) { s += $i; s2 += $i * $i; list = list sprintf(" %.1f", $i) }
		j = (s2 > 0) ? s * s / (n * s2) : 0
		printf "%-4s | %d |%s | %7.1f | %5.3f | %7.1f %7.1f | %7.1f %7.1f | %4.1fx\n",
			mode, n, list, s, j, $(n + 2), $(n + 3), $(n + 5), $(n + 6), ($(n + 3) > 0) ? $(n + 6) / $(n + 3) : 0
	}'
}

# with_tcp MODE CCARGS...: one write_bw flow and one iperf3 TCP stream
# through the bottleneck at once; prints one report line.
with_tcp() {
	local mode=$1
	shift
	in_a iperf3 -s -1 -B "$IP_A" -p "$IPERF_PORT" >"$OUT/$mode-tcp.server" 2>&1 &
	pids+=($!)
	sleep 0.5
	start "$mode-tcp-bw" 0 write_bw -s "$SIZE" -D "$SECS" "$@" || return 1
	local g=$cpid
	in_b timeout $((SECS + 60)) iperf3 -c "$IP_A" -B "$IP_B" -p "$IPERF_PORT" -t "$SECS" -J >"$OUT/$mode-tcp.json" 2>&1
	wait "$g"
	wait
	pids=()
	local gb tb
	gb=$(jq -rs 'map(select(.side == "client" and .bw_average != null))[0].bw_average // 0' "$OUT/$mode-tcp-bw.client" 2>/dev/null)
	tb=$(jq -r '.end.sum_received.bytes / .end.sum_received.seconds / 1048576 // 0' "$OUT/$mode-tcp.json" 2>/dev/null)
	awk -v mode="$mode" -v g="${gb:-0}" -v t="${tb:-0}" 'BEGIN {
		s = g + t; s2 = g * g + t * t
		printf "%-4s | goroce %.1f MB/s, TCP %.1f MB/s | Jain %.3f\n", mode, g, t, (s2 > 0) ? s * s / (2 * s2) : 0
	}'
}

run_mode() {
	local mode=$1 ccargs=() n
	case $mode in
	off) ccargs=(--no-ecn) ;;
	rtt) ccargs=(--rtt-cc --rtt-target "$RTT_TARGET") ;;
	*) echo "cc.sh: unknown mode $mode" >&2; return 1 ;;
	esac
	start "$mode-lat0" 9 write_lat -s 64 -n "$LAT_ITERS" "${ccargs[@]}" || return 1
	wait "$cpid"
	wait
	pids=()
	lat0=$(lat "$OUT/$mode-lat0.client")
	sleep 1
	for n in $FLOWS; do
		flows "$mode" "$n" "${ccargs[@]}" || return 1
		sleep 1
	done
}

echo "building goroce-perf" >&2
(cd "$ROOT" && go build -o "$BIN/goroce-perf" ./cmd/goroce-perf) || { echo "cc.sh: build failed" >&2; exit 2; }
setup_net || { echo "cc.sh: cannot create the namespaces or the tbf qdisc" >&2; exit 2; }
echo "# bench/cc.sh: write_bw -s $SIZE -D $SECS flows through tbf rate $RATE limit $LIMIT B, path MTU 4096; write_lat -s 64 -n $LAT_ITERS alongside (nice ${LAT_NICE:-0}); --rtt-target $RTT_TARGET"
echo "# $(uptime)"
echo "# mode | flows | each flow MB/s | sum | Jain | write_lat unloaded p50 p99 usec | loaded p50 p99 | loaded/unloaded p99"
for m in $MODES; do
	run_mode "$m"
done
echo "# one goroce flow next to one TCP stream (iperf3)"
for m in $MODES; do
	case $m in
	off) with_tcp "$m" --no-ecn ;;
	rtt) with_tcp "$m" --rtt-cc --rtt-target "$RTT_TARGET" ;;
	esac
done
echo "# $(uptime)"
