#!/usr/bin/env bash
# seal.sh - the cost of sealed connections (cm.Security: AES-256-GCM on
# every packet) on a veth path, issue 21 item 4.
#
# Two network namespaces, goroce-sa (10.97.0.1/24) and goroce-sb
# (10.97.0.2/24), joined by a veth pair with MTU 9000 so that the IB MTU
# is 4096 (a sealed packet is 24 bytes longer: 4096 + 28 + 24 + 4 + UDP
# and IP fit). Server in goroce-sa, client in goroce-sb, both connected
# with rdma_cm (-R); "sealed" adds --psk-file (Require on both sides).
#
# For ROUNDS rounds, alternating which mode goes first, it runs
#   goroce-perf write_bw -R -s 65536 -D $DURATION   (64 KiB WRITE bandwidth)
#   goroce-perf write_lat -R -s 8 -n $LAT_ITERS     (8-byte WRITE latency)
# plain and sealed, and prints one line per run with the 1-minute load
# average at its start (write_bw: the CPU seconds per GB of each process;
# write_lat: the typical latency and the 99th percentile), then the
# medians of each mode and their ratio.
# The goals (issue 21): at most 20 % less 64 KiB WRITE throughput and at
# most 2 usec more write_lat (typical).
#
# Usage (as root, from anywhere): bench/seal.sh
# Environment: ROUNDS (default 5), DURATION (seconds, default 5),
#   LAT_ITERS (default 20000), OUT (keep the JSON outputs there; default a
#   temporary directory, removed).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NS_A=goroce-sa
NS_B=goroce-sb
IP_A=10.97.0.1
IP_B=10.97.0.2
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
LAT_ITERS=${LAT_ITERS:-20000}
export PATH=$PATH:/usr/local/go/bin

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_require_root seal.sh 'namespaces'
bench_dirs seal
pids=()

cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	bench_netns_down "$NS_A" "$NS_B"
	bench_dirs_remove
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v jq >/dev/null || { echo "seal.sh: needs jq" >&2; exit 2; }
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$BIN/goroce-perf" ./cmd/goroce-perf) || exit 2
head -c 32 /dev/urandom | base64 >"$BIN/psk"

ip netns del "$NS_A" 2>/dev/null
ip netns del "$NS_B" 2>/dev/null
ip netns add "$NS_A" && ip netns add "$NS_B" &&
	ip link add veth-sa netns "$NS_A" type veth peer name veth-sb netns "$NS_B" &&
	ip netns exec "$NS_A" ip addr add "$IP_A/24" dev veth-sa &&
	ip netns exec "$NS_B" ip addr add "$IP_B/24" dev veth-sb &&
	ip netns exec "$NS_A" ip link set veth-sa mtu 9000 up &&
	ip netns exec "$NS_B" ip link set veth-sb mtu 9000 up &&
	ip netns exec "$NS_A" ip link set lo up && ip netns exec "$NS_B" ip link set lo up ||
	{ echo "seal.sh: cannot build the veth pair" >&2; exit 2; }

# run MODE TEST ARGS...: one server/client run; prints the client's JSON
# result with "srv_cpu" set to the server's CPU seconds per GB.
run() {
	local mode=$1 t=$2
	shift 2
	local extra=()
	[[ $mode == sealed ]] && extra=(--psk-file "$BIN/psk")
	local base="$OUT/$t-$mode-$round"
	ip netns exec "$NS_A" timeout -k 5 120 "$BIN/goroce-perf" "$t" -R -m 4096 --json "$@" "${extra[@]}" \
		--bind "$IP_A" >"$base.srv" 2>"$base.srv.err" &
	local spid=$!
	pids+=("$spid")
	sleep 0.5 # the client retries its REQ (perftest's rdma_cm_client_connection) meanwhile
	ip netns exec "$NS_B" timeout -k 5 120 "$BIN/goroce-perf" "$t" -R -m 4096 --json "$@" "${extra[@]}" \
		--bind "$IP_B" "$IP_A" >"$base.cli" 2>"$base.cli.err"
	local rc=$?
	wait "$spid"
	if [[ $rc != 0 ]]; then
		echo "seal.sh: $t $mode failed: $(tail -3 "$base.cli.err")" >&2
		return 1
	fi
	local srv_cpu
	srv_cpu=$(jq -r 'select(.side == "server") | .cpu_sec_per_gb' "$base.srv" | head -1)
	jq -c --argjson s "${srv_cpu:-null}" 'select(.side == "client") | .srv_cpu = $s' "$base.cli"
}

printf '%-6s %-7s %-9s %12s %10s %8s %s\n' round mode test result unit load1 'CPU s/GB client/server'
row() { printf '%-6s %-7s %-9s %12.2f %10s %8s %s\n' "$@"; }
for ((round = 1; round <= ROUNDS; round++)); do
	modes=(plain sealed)
	((round % 2 == 0)) && modes=(sealed plain)
	for mode in "${modes[@]}"; do
		load=$(cut -d' ' -f1 /proc/loadavg)
		r=$(run "$mode" write_bw -s 65536 -D "$DURATION") || continue
		row "$round" "$mode" write_bw "$(jq -r .bw_average <<<"$r")" MB/s "$load" \
			"$(jq -r '"\(.cpu_sec_per_gb*100|round/100)/\(.srv_cpu*100|round/100)"' <<<"$r")" | tee -a "$OUT/table"
		load=$(cut -d' ' -f1 /proc/loadavg)
		r=$(run "$mode" write_lat -s 8 -n "$LAT_ITERS") || continue
		row "$round" "$mode" write_lat "$(jq -r .t_typical_usec <<<"$r")" usec "$load" \
			"p99 $(jq -r '.p99_usec*100|round/100' <<<"$r")" | tee -a "$OUT/table"
	done
done

median() { bench_median; }
col() { awk -v m="$1" -v t="$2" '$2 == m && $3 == t { print $4 }' "$OUT/table"; }
bp=$(col plain write_bw | median)
bs=$(col sealed write_bw | median)
cpu() { awk -v m="$1" '$2 == m && $3 == "write_bw" { split($7, c, "/"); print c[1] + c[2] }' "$OUT/table"; }
cp=$(cpu plain | median)
cs=$(cpu sealed | median)
lp=$(col plain write_lat | median)
ls=$(col sealed write_lat | median)
p99() { awk -v m="$1" '$2 == m && $3 == "write_lat" { print $8 }' "$OUT/table"; }
pp=$(p99 plain | median)
ps=$(p99 sealed | median)
echo
echo "medians over $ROUNDS rounds:"
awk -v bp="$bp" -v bs="$bs" -v cp="$cp" -v cs="$cs" -v lp="$lp" -v ls="$ls" -v pp="$pp" -v ps="$ps" 'BEGIN {
	printf "  write_bw 64 KiB: plain %.0f MB/s, sealed %.0f MB/s: %+.1f %% (goal >= -20 %%)\n", bp, bs, (bs - bp) / bp * 100
	printf "  write_bw CPU, client + server: plain %.2f s/GB, sealed %.2f s/GB: %+.0f %%\n", cp, cs, (cs - cp) / cp * 100
	printf "  write_lat 8 B typical: plain %.2f usec, sealed %.2f usec: %+.2f usec (goal <= +2)\n", lp, ls, ls - lp
	printf "  write_lat 8 B p99: plain %.2f usec, sealed %.2f usec: %+.2f usec\n", pp, ps, ps - pp
}'
