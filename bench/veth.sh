#!/usr/bin/env bash
# bench/veth.sh: goroce against the kernel's TCP and UDP across a veth pair
# between two network namespaces, the nearest thing to a NIC path on one
# machine (issue 17): every packet is segmented to the link's MTU and
# crosses the kernel's stack twice, which loopback's 64 KiB MTU hides.
#
#   sudo bench/veth.sh           # as root (namespaces); installs iperf3, sockperf, jq
#
# For each link MTU (1500 and 9000), in one run, on the same path:
#
#   1. bandwidth: iperf3 TCP, one stream, against goroce-perf write_bw with
#      64 KiB WRITEs on one QP (the port's MTU follows the link: 1024 at
#      1500, 4096 at 9000), in rounds that alternate which goes first; the
#      CPU seconds per GB of both ends (iperf3: its client's and server's
#      CPU utilisation; goroce-perf: getrusage of each process); and the
#      median and p99.99 of goroce's per-message times (post to
#      completion under load: the goal is p99.99 <= 10 x median);
#   2. message rate: 64-byte WRITEs posted one at a time, and in lists of
#      16 (with perftest's default send queue of 128, and 512 deep: 128
#      messages a round trip bound the rate of a path whose round trip
#      is 100 µs to 1.3 M/s), against iperf3 UDP with 64-byte datagrams
#      at full speed (-b 0; the datagrams that arrived, per second);
#   3. latency: sockperf UDP ping-pong (half round trips, 14-byte
#      messages) against goroce-perf write_lat with 8-byte WRITEs; p50
#      and p99.9.
#
# Server processes run in namespace B, clients in A. It prints a markdown
# report (the ratios issue 17's goals are stated in) and keeps every raw
# output in $BENCH_VETH_RAW. bench/run.sh runs it after its loopback part.
#
# Environment (defaults in brackets):
#   BENCH_VETH_MTUS [1500 9000]  link MTUs
#   BENCH_DURATION [5]           seconds of each bandwidth and rate run
#   BENCH_ROUNDS [3]             rounds of the bandwidth comparison
#   BENCH_LAT_ITERS [20000]      round trips of goroce's latency run
#   BENCH_RATE_ITERS [50000]     WRITEs of goroce's message rate runs
#   BENCH_VETH_RAW [a temporary directory]  raw outputs
#   BENCH_PERF                   a goroce-perf binary (default: built here)
#   BENCH_NO_INSTALL             set to skip apt-get
set -uo pipefail # not -e: netns-pair.sh's teardown tolerates what is not there

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/netns-pair.sh
. "$root/bench/netns-pair.sh"

mtus=${BENCH_VETH_MTUS:-1500 9000}
dur=${BENCH_DURATION:-5}
rounds=${BENCH_ROUNDS:-3}
lat_iters=${BENCH_LAT_ITERS:-20000}
rate_iters=${BENCH_RATE_ITERS:-50000}
raw=${BENCH_VETH_RAW:-$(mktemp -d /tmp/goroce-veth.XXXXXX)}
nsa=gvethA nsb=gvethB ipa=10.251.0.1 ipb=10.251.0.2
iperf_port=15271 sockperf_port=15571

log() { printf 'veth: %s\n' "$*" >&2; }

inA() { ip netns exec "$nsa" "$@"; }
inB() { ip netns exec "$nsb" "$@"; }

# perf NAME ARGS...: goroce-perf server in B and client in A with ARGS;
# each side's JSON lines into $raw/NAME.{server,client}.json.
perf() {
	local name=$1
	shift
	log "goroce-perf $*"
	inB timeout 300 "$P" "$@" --bind "$ipb" --json >"$raw/$name.server.json" 2>"$raw/$name.server.err" &
	local srv=$!
	sleep 1
	inA timeout 300 "$P" "$@" --bind "$ipa" --json "$ipb" >"$raw/$name.client.json" 2>"$raw/$name.client.err" ||
		log "goroce-perf $* failed: $(tail -1 "$raw/$name.client.err")"
	wait "$srv" || log "goroce-perf server $* failed: $(tail -1 "$raw/$name.server.err")"
}

# iperf NAME ARGS...: iperf3 server in B, client in A with ARGS, JSON.
iperf() {
	local name=$1
	shift
	log "iperf3 $*"
	inB iperf3 -s -1 -B "$ipb" -p "$iperf_port" >"$raw/$name.server.log" 2>&1 &
	local srv=$!
	sleep 0.5
	inA timeout $((dur + 30)) iperf3 -c "$ipb" -B "$ipa" -p "$iperf_port" -t "$dur" -J "$@" >"$raw/$name.json" ||
		log "iperf3 $* failed"
	wait "$srv" || true
}

sockperf_pp() {
	local name=$1
	log "sockperf ping-pong"
	inB sockperf server -i "$ipb" -p "$sockperf_port" >"$raw/$name.server.log" 2>&1 &
	local srv=$!
	sleep 0.5
	inA timeout $((dur + 30)) sockperf ping-pong -i "$ipb" -p "$sockperf_port" -m 14 -t "$dur" >"$raw/$name.log" 2>&1 ||
		log "sockperf failed"
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}

# median of the numbers on stdin ("-" if none)
median() { bench_median; }
# jqf FILE FILTER: the filter's value, "" when the file is missing or not JSON
jqf() { jq -r "$2 // empty" "$1" 2>/dev/null | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
fmt() { bench_fmt "$@"; }

measure() {
	local mtu=$1 i
	netns_pair_up "$nsa" "$nsb" "$ipa" "$ipb" "$mtu"
	for ((i = 1; i <= rounds; i++)); do
		if ((i % 2)); then
			iperf "m$mtu-tcp-r$i"
			perf "m$mtu-bw-r$i" write_bw -s 65536 -D "$dur"
		else
			perf "m$mtu-bw-r$i" write_bw -s 65536 -D "$dur"
			iperf "m$mtu-tcp-r$i"
		fi
	done
	iperf "m$mtu-udp64" -u -l 64 -b 0
	perf "m$mtu-rate" write_bw -s 64 -n "$rate_iters"
	perf "m$mtu-rate-l16" write_bw -s 64 -n "$rate_iters" -l 16
	perf "m$mtu-rate-l16-t512" write_bw -s 64 -n "$rate_iters" -l 16 -t 512
	sockperf_pp "m$mtu-sockperf"
	perf "m$mtu-lat" write_lat -s 8 -n "$lat_iters"
	netns_pair_down "$nsa" "$nsb"
}

# report MTU: one block of the markdown table.
report() {
	local m=$1 f i
	local tcp_mbs=() tcp_cpu=() g_mbs=() g_cpu=() g_p50=() g_p9999=()
	for ((i = 1; i <= rounds; i++)); do
		f=$raw/m$m-tcp-r$i.json
		# MB/s (2^20, as perftest's MB/sec) and CPU s/GB of both ends
		tcp_mbs+=("$(jqf "$f" '.end.sum_received.bytes / .end.sum_received.seconds / 1048576')")
		tcp_cpu+=("$(jqf "$f" '(.end.cpu_utilization_percent.host_total + .end.cpu_utilization_percent.remote_total) / 100 * .end.sum_received.seconds / (.end.sum_received.bytes / 1e9)')")
		f=$raw/m$m-bw-r$i
		g_mbs+=("$(jqf "$f.client.json" '.bw_average')")
		g_cpu+=("$(awk -v a="$(jqf "$f.client.json" '.cpu_sec_per_gb')" -v b="$(jqf "$f.server.json" '.cpu_sec_per_gb')" 'BEGIN { if (a != "" && b != "") print a + b }')")
		g_p50+=("$(jqf "$f.client.json" '.p50_usec')")
		g_p9999+=("$(jqf "$f.client.json" '.p99_99_usec')")
	done
	local tm gm tc gc p50 p9999
	tm=$(printf '%s\n' "${tcp_mbs[@]}" | grep . | median)
	gm=$(printf '%s\n' "${g_mbs[@]}" | grep . | median)
	tc=$(printf '%s\n' "${tcp_cpu[@]}" | grep . | median)
	gc=$(printf '%s\n' "${g_cpu[@]}" | grep . | median)
	p50=$(printf '%s\n' "${g_p50[@]}" | grep . | median)
	p9999=$(printf '%s\n' "${g_p9999[@]}" | grep . | median)
	local udp rate rate16 rate16d
	udp=$(jqf "$raw/m$m-udp64.json" '(.end.sum.packets - .end.sum.lost_packets) / .end.sum.seconds / 1e6')
	rate=$(jqf "$raw/m$m-rate.client.json" '.msg_rate_mpps')
	rate16=$(jqf "$raw/m$m-rate-l16.client.json" '.msg_rate_mpps')
	rate16d=$(jqf "$raw/m$m-rate-l16-t512.client.json" '.msg_rate_mpps')
	local sp50 sp999 gl50 gl999 mtu_used
	sp50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$raw/m$m-sockperf.log" 2>/dev/null | head -1)
	sp999=$(sed -n 's/.*percentile 99.900 = *\([0-9.]*\).*/\1/p' "$raw/m$m-sockperf.log" 2>/dev/null | head -1)
	gl50=$(jqf "$raw/m$m-lat.client.json" '.t_typical_usec')
	gl999=$(jqf "$raw/m$m-lat.client.json" '.p99_9_usec')
	mtu_used=$(jqf "$raw/m$m-bw-r1.client.json" '.mtu')
	printf '| %s | 64 KiB WRITE vs TCP, MB/s | %s | %s | **%s×** |\n' "$m (IB MTU ${mtu_used:--})" "$(fmt "$gm")" "$(fmt "$tm")" "$(ratio "$gm" "$tm")"
	printf '| | CPU s/GB, both ends | %s | %s | %s× |\n' "$(fmt "$gc" %.2f)" "$(fmt "$tc" %.2f)" "$(ratio "$gc" "$tc")"
	printf '| | per-message p50 / p99.99, µs (goroce) | %s / %s | | p99.99 = %s× p50 |\n' "$(fmt "$p50")" "$(fmt "$p9999")" "$(ratio "$p9999" "$p50")"
	printf '| | 64 B messages, M/s: one per post vs UDP | %s | %s | **%s×** |\n' "$(fmt "$rate" %.3f)" "$(fmt "$udp" %.3f)" "$(ratio "$rate" "$udp")"
	printf '| | 64 B messages, M/s: lists of 16 vs UDP | %s | %s | %s× |\n' "$(fmt "$rate16" %.3f)" "$(fmt "$udp" %.3f)" "$(ratio "$rate16" "$udp")"
	printf '| | same, send queue 512 deep (-t 512) | %s | %s | %s× |\n' "$(fmt "$rate16d" %.3f)" "$(fmt "$udp" %.3f)" "$(ratio "$rate16d" "$udp")"
	printf '| | latency p50, µs (write_lat 8 B vs sockperf UDP) | %s | %s | %s× |\n' "$(fmt "$gl50" %.1f)" "$(fmt "$sp50" %.1f)" "$(ratio "$gl50" "$sp50")"
	printf '| | latency p99.9, µs | %s | %s | %s× |\n' "$(fmt "$gl999" %.1f)" "$(fmt "$sp999" %.1f)" "$(ratio "$gl999" "$sp999")"
}

main() {
	[[ $(id -u) == 0 ]] || { log "needs root (network namespaces)"; exit 1; }
	bench_install iperf3 sockperf jq
	mkdir -p "$raw"
	if [[ -n ${BENCH_PERF:-} ]]; then
		P=$BENCH_PERF
	else
		log "building goroce-perf"
		(cd "$root" && go build -o "$raw/goroce-perf" ./cmd/goroce-perf)
		P=$raw/goroce-perf
	fi
	trap 'netns_pair_down "$nsa" "$nsb"' EXIT
	local load0 m
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	for m in $mtus; do
		measure "$m"
	done
	printf '### veth pair between two namespaces (load %s at the start, %s at the end; %s s runs, medians of %s rounds)\n\n' \
		"$load0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$dur" "$rounds"
	printf '| link MTU | | goroce | kernel | ratio |\n|---|---|---|---|---|\n'
	for m in $mtus; do
		report "$m"
	done
	printf '\nGoals (issue 17): WRITE/TCP >= 1.0 at MTU 9000 and >= 0.8 at 1500, CPU ratio <= 1; p99.99 <= 10x p50;\n'
	printf 'one-per-post rate >= 1.5x UDP, lists >= 2 M/s. Raw outputs: %s\n' "$raw"
}

main "$@"
