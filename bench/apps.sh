#!/usr/bin/env bash
# bench/apps.sh: Go applications over goroce (package rsocket, and the
# one-sided key-value store on package verbs and cm) against the same
# programs over TCP, on the same path in the same run (issue 18, items 3
# and 4).
#
# Two network namespaces, goroce-aa (10.96.0.1/24, the servers) and
# goroce-ab (10.96.0.2/24, the clients), joined by a veth pair with MTU
# 9000 (IB MTU 4096): bench/netns-pair.sh. For ROUNDS rounds, each
# workload of examples/apps/cmd/goroce-apps runs over goroce and over TCP
# (which goes first alternates by round), each run a fresh server process
# and a fresh client process:
#
#   grpc-unary   gRPC unary echo of 1 KiB, one call at a time
#   grpc-stream  gRPC bidirectional stream echoing 64 KiB messages, 4 ahead
#   http         net/http GET of 1 KiB, keep-alive, one request at a time
#   http-1m      net/http GET of 1 MiB
#   kv-get       key-value GET of a 256-byte value (10,000 keys): over
#                goroce one RDMA READ of the server's table, over TCP a
#                request the server's goroutine answers
#   kv-put       key-value PUT of a 256-byte value (two-sided on both)
#
# Each run lasts DURATION seconds after the first request, which connects
# and is not timed; latency percentiles are of the timed requests (for the
# stream, of each message's echo). CPU is getrusage of each whole process:
# the server's from its start (opening the device, registering the table
# and buffers, listening, accepting, tearing down) until SIGTERM after the
# client ended, the client's from its start (device, registration,
# connection setup, first request) to its exit; divided by the requests
# (first included) or by the payload GB moved both ways. The table is the
# median of the rounds for each workload and transport.
#
# Usage (as root): bench/apps.sh
# Environment: ROUNDS (default 3), DURATION (seconds, default 5), WORKLOADS
#   (a subset, as "workload:app ..."; default all), PROFILE
#   (set: write CPU profiles of both sides of each goroce run to OUT),
#   OUT (keep the raw results there; default a temporary directory).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/netns-pair.sh"
NS_A=goroce-aa
NS_B=goroce-ab
IP_A=10.96.0.1
IP_B=10.96.0.2
PORT=7471
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
WORKLOADS=${WORKLOADS:-"grpc-unary:grpc grpc-stream:grpc http:http http-1m:http kv-get:kv kv-put:kv"}
export PATH=$PATH:/usr/local/go/bin

bench_require_root apps.sh 'namespaces'
bench_dirs apps
cleanup() {
	netns_pair_down "$NS_A" "$NS_B"
	bench_dirs_remove
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

(cd "$ROOT/examples/apps" && CGO_ENABLED=0 go build -o "$BIN/goroce-apps" ./cmd/goroce-apps) || exit 2
netns_pair_up "$NS_A" "$NS_B" "$IP_A" "$IP_B" 9000 || exit 2

# run WORKLOAD APP NET: one server and one client; appends the client's and
# the server's JSON lines to results.jsonl.
run() {
	local wl=$1 app=$2 net=$3 base="$OUT/$1-$3-$round" prof=()
	[[ -n ${PROFILE:-} && $net == rdma ]] && prof=(-cpuprofile "$base.srv.pprof")
	# timeout passes the TERM below on to the server, and ends a server
	# that would not end.
	timeout -k 5 $((DURATION + 90)) ip netns exec "$NS_A" "$BIN/goroce-apps" serve -app "$app" -net "$net" -addr "$IP_A:$PORT" "${prof[@]}" \
		>"$base.srv" 2>"$base.srv.err" &
	local spid=$! i
	for ((i = 0; i < 100; i++)); do
		grep -q '^server: listening' "$base.srv" 2>/dev/null && break
		sleep 0.05
	done
	[[ -n ${PROFILE:-} && $net == rdma ]] && prof=(-cpuprofile "$base.cli.pprof")
	timeout -k 5 $((DURATION + 60)) ip netns exec "$NS_B" "$BIN/goroce-apps" run -workload "$wl" -net "$net" \
		-addr "$IP_A:$PORT" -local "$IP_B" -d "${DURATION}s" "${prof[@]}" >"$base.cli" 2>"$base.cli.err"
	local rc=$?
	kill -TERM "$spid" 2>/dev/null
	wait "$spid"
	if [[ $rc != 0 ]]; then
		echo "apps.sh: $wl over $net failed: $(tail -3 "$base.cli.err")" >&2
		return 1
	fi
	cat "$base.cli" >>"$OUT/results.jsonl"
	grep '^{' "$base.srv" >>"$OUT/results.jsonl"
}

echo "apps.sh: $(date -u +%FT%TZ), $(nproc) CPUs, $ROUNDS rounds of ${DURATION}s per workload and transport"
echo "uptime at start: $(uptime)"
failed=0
for ((round = 1; round <= ROUNDS; round++)); do
	nets=(rdma tcp)
	((round % 2 == 0)) && nets=(tcp rdma)
	for w in $WORKLOADS; do
		for net in "${nets[@]}"; do
			run "${w%%:*}" "${w##*:}" "$net" || failed=1
		done
	done
done
echo "uptime at end:   $(uptime)"
echo
"$BIN/goroce-apps" report <"$OUT/results.jsonl"
exit $failed
