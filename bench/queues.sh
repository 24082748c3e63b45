#!/usr/bin/env bash
# bench/queues.sh: how goroce's throughput scales with QPs, with one and
# with several receive queues per device (DeviceConfig.ReceiveQueues,
# goroce-perf --receive-queues; issue 17, item 4).
#
#   bench/queues.sh                    # loopback: both devices in one process
#   sudo BENCH_QUEUES_VETH=1 bench/queues.sh   # and across a veth pair (root)
#
# For each receive queue count N (BENCH_QUEUES_N) and each test
# (BENCH_QUEUES_TESTS), goroce-perf runs 64 KiB messages for
# BENCH_DURATION seconds (send_bw, which has no -D yet: BENCH_QUEUES_ITERS
# messages per QP) on 1, 2 and 4 QPs (-q), in rounds
# (BENCH_ROUNDS) whose order of N alternates; the table gives the median
# MB/s of each and its ratio to 1 QP with the same N, measured in the same
# run, the CPU seconds per GB of the processes (median) and the cores
# they kept busy (CPU seconds per second: on 2 cores, 1 QP that already
# keeps 1.8 busy leaves nothing for a second QP to gain), and the load
# average before each round (uptime). On loopback both
# devices run in one process; on veth (link MTU BENCH_VETH_MTU, 9000) the
# server runs in one namespace and the client in another, both created
# (and deleted) here.
#
# Environment (defaults in brackets):
#   BENCH_QUEUES_N [1 2]            receive queue counts
#   BENCH_QUEUES_QPS [1 2 4]        QP counts
#   BENCH_QUEUES_TESTS [write_bw send_bw]
#   BENCH_DURATION [5]  BENCH_ROUNDS [3]  BENCH_QUEUES_ITERS [20000]
#   BENCH_QUEUES_VETH               set: also measure across a veth pair
#   BENCH_VETH_MTU [9000]
#   BENCH_PERF                      a goroce-perf binary (default: built here)
#   BENCH_QUEUES_RAW                an earlier run's raw directory: print its
#                                   tables again, measure nothing
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/netns-pair.sh
. "$root/bench/netns-pair.sh"

ns=${BENCH_QUEUES_N:-1 2}
qps=${BENCH_QUEUES_QPS:-1 2 4}
tests=${BENCH_QUEUES_TESTS:-write_bw send_bw}
dur=${BENCH_DURATION:-5}
iters=${BENCH_QUEUES_ITERS:-20000}
rounds=${BENCH_ROUNDS:-3}
mtu=${BENCH_VETH_MTU:-9000}
report_only=0
if [[ -n ${BENCH_QUEUES_RAW:-} ]]; then
	raw=$BENCH_QUEUES_RAW report_only=1 # tables from an earlier run's outputs
else
	raw=$(mktemp -d /tmp/goroce-queues.XXXXXX)
fi
nsa=gqueuesA nsb=gqueuesB ipa=10.252.0.1 ipb=10.252.0.2
g1=127.0.77.1 g2=127.0.77.2

log() { printf 'queues: %s\n' "$*" >&2; }

P=${BENCH_PERF:-}
if [[ -z $P ]] && ((!report_only)); then
	P=$raw/goroce-perf
	(cd "$root" && go build -o "$P" ./cmd/goroce-perf) || exit 2
fi

# bw FILE: the client's average bandwidth (MB/s) in goroce-perf's JSON.
bw() { jq -r 'select(.side != "server") | .bw_average // empty' "$1" 2>/dev/null | tail -1; }
# cpu NAME: CPU seconds per GB of the run's processes: on loopback the
# one process's (the client's line; the server's is the same process), on
# veth the client's and the server's, each from its own output.
cpu() {
	local own='select(.side == "client" and .cpu_sec_per_gb != null) | .cpu_sec_per_gb'
	if [[ $1 == lo-* ]]; then
		jq -r "$own" "$raw/$1.json" 2>/dev/null | head -1
		return
	fi
	{
		jq -r "$own" "$raw/$1.json" 2>/dev/null | head -1
		jq -r 'select(.side == "server" and .cpu_sec_per_gb != null) | .cpu_sec_per_gb' "$raw/$1.server.json" 2>/dev/null | head -1
	} | awk 'NF { s += $1; n++ } END { if (n == 2) printf "%.4f\n", s }'
}

# run PATH NAME ARGS...: one goroce-perf run on PATH (lo or veth), its JSON
# into $raw/NAME.json.
run() {
	local path=$1 name=$2
	shift 2
	if [[ $path == lo ]]; then
		timeout 300 "$P" "$@" --loopback --loopback-addrs "$g1,$g2" -p 0 --json >"$raw/$name.json" 2>"$raw/$name.err" ||
			log "$name failed: $(tail -1 "$raw/$name.err")"
		return
	fi
	ip netns exec "$nsb" timeout 300 "$P" "$@" --bind "$ipb" --json >"$raw/$name.server.json" 2>"$raw/$name.server.err" &
	local srv=$!
	sleep 1
	ip netns exec "$nsa" timeout 300 "$P" "$@" --bind "$ipa" --json "$ipb" >"$raw/$name.json" 2>"$raw/$name.err" ||
		log "$name failed: $(tail -1 "$raw/$name.err")"
	wait "$srv" || true
}

measure() {
	local path=$1 t n q i
	echo
	echo "### $path$([[ $path == veth ]] && echo ", link MTU $mtu")"
	echo
	echo "| test | receive queues | QPs | MB/s (median of $rounds) | ratio to 1 QP | CPU s/GB | cores busy | load before |"
	echo "|---|---|---|---|---|---|---|---|"
	for t in $tests; do
		local order=($ns)
		for ((i = 1; i <= rounds && !report_only; i++)); do
			for n in "${order[@]}"; do
				for q in $qps; do
					uptime | sed 's/.*load average: //; s/,.*//' >"$raw/$path-$t-n$n-q$q-r$i.load"
					local span=(-D "$dur")
					[[ $t == send_bw ]] && span=(-n "$iters") # send_bw has no -D yet
					run "$path" "$path-$t-n$n-q$q-r$i" "$t" -s 65536 "${span[@]}" -q "$q" --receive-queues "$n"
				done
			done
			order=($(printf '%s\n' "${order[@]}" | tac)) # alternate which N goes first
		done
		for n in $ns; do
			local base=
			for q in $qps; do
				local med load spg cores
				med=$(for ((i = 1; i <= rounds; i++)); do bw "$raw/$path-$t-n$n-q$q-r$i.json"; done | bench_median)
				spg=$(for ((i = 1; i <= rounds; i++)); do cpu "$path-$t-n$n-q$q-r$i"; done | bench_median)
				# cores busy: CPU seconds per second of the run, each round's
				cores=$(for ((i = 1; i <= rounds; i++)); do
					awk -v b="$(bw "$raw/$path-$t-n$n-q$q-r$i.json")" -v c="$(cpu "$path-$t-n$n-q$q-r$i")" 'BEGIN { if (b != "" && c != "") printf "%.2f\n", b * c / 1000 }'
				done | bench_median)
				load=$(cat "$raw/$path-$t-n$n-q$q-r"*.load 2>/dev/null | tr '\n' ' ')
				[[ $q == 1 ]] && base=$med
				echo "| $t | $n | $q | $(bench_fmt "$med") | $(awk -v a="$med" -v b="$base" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }') | $(bench_fmt "$spg" %.2f) | $(bench_fmt "$cores" %.2f) | $load|"
			done
		done
	done
}

echo "goroce-perf, 64 KiB messages, ${dur} s per run; $(nproc) cores; $(uptime)"
measure lo
if [[ -n ${BENCH_QUEUES_VETH:-} ]]; then
	if ((!report_only)); then
		bench_require_root queues.sh "network namespaces"
		netns_pair_up "$nsa" "$nsb" "$ipa" "$ipb" "$mtu" || exit 1
	fi
	measure veth
	((report_only)) || netns_pair_down "$nsa" "$nsb"
fi
log "raw outputs in $raw"
