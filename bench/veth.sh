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
#      1500, 4096 at 9000), one signaled completion per 100 WRITEs (-Q 100:
#      perftest's default moderation, which it keeps for large messages
#      when it sleeps on completion events, as goroce-perf does; a
#      streaming application signals selectively too), and again with
#      every WRITE signaled (-Q 1, perftest's busy-polling default for
#      large messages), in rounds that alternate which goes first; the
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
# goroce-perf runs twice in each step: with Go's default GOMAXPROCS (every
# CPU: both processes' schedulers share the machine's two cores) and with
# GOMAXPROCS=1 (one processor per end, as iperf3, sockperf and perftest
# are single-threaded). The report has a column for each (README,
# "Cores and GOMAXPROCS", says why the second is much faster here).
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
#   BENCH_RATE_ITERS [500000]    WRITEs of goroce's one-per-post rate run
#                                (about a second: 50,000 was over in 30 ms,
#                                mostly ramp-up); the post-list runs send
#                                four times as many, since they run at 1 to
#                                2.3 M/s (500,000 lasted 0.2 s)
#   BENCH_VETH_RAW [a temporary directory]  raw outputs
#   BENCH_PERF                   a goroce-perf binary (default: built here)
#   BENCH_GOMAXPROCS [default 1] goroce-perf's GOMAXPROCS settings, one
#                                column each ("default": the runtime's)
#   BENCH_NO_INSTALL             set to skip apt-get
set -uo pipefail # not -e: netns-pair.sh's teardown tolerates what is not there

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/netns-pair.sh
. "$root/bench/netns-pair.sh"

mtus=${BENCH_VETH_MTUS:-1500 9000}
dur=${BENCH_DURATION:-5}
rounds=${BENCH_ROUNDS:-3}
lat_iters=${BENCH_LAT_ITERS:-20000}
rate_iters=${BENCH_RATE_ITERS:-500000}
read -r -a variants <<<"${BENCH_GOMAXPROCS:-default 1}"
raw=${BENCH_VETH_RAW:-$(mktemp -d /tmp/goroce-veth.XXXXXX)}
nsa=gvethA nsb=gvethB ipa=10.251.0.1 ipb=10.251.0.2
iperf_port=15271 sockperf_port=15571

log() { printf 'veth: %s\n' "$*" >&2; }

inA() { ip netns exec "$nsa" "$@"; }
inB() { ip netns exec "$nsb" "$@"; }

# vname V: the prefix of the raw outputs of goroce-perf run with
# GOMAXPROCS setting V ("default" or a number).
vname() { if [[ $1 == default ]]; then printf 'gdef'; else printf 'g%s' "$1"; fi; }

# perf NAME ARGS...: goroce-perf server in B and client in A with ARGS,
# once per GOMAXPROCS variant; each side's JSON lines into
# $raw/VARIANT-NAME.{server,client}.json.
perf() {
	local name=$1 v
	shift
	for v in "${variants[@]}"; do
		local out envp=(env)
		out=$raw/$(vname "$v")-$name
		[[ $v == default ]] || envp=(env GOMAXPROCS="$v")
		log "goroce-perf (GOMAXPROCS $v) $*"
		inB timeout 300 "${envp[@]}" "$P" "$@" --bind "$ipb" --json >"$out.server.json" 2>"$out.server.err" &
		local srv=$!
		sleep 1
		inA timeout 300 "${envp[@]}" "$P" "$@" --bind "$ipa" --json "$ipb" >"$out.client.json" 2>"$out.client.err" ||
			log "goroce-perf $* failed: $(tail -1 "$out.client.err")"
		wait "$srv" || log "goroce-perf server $* failed: $(tail -1 "$out.server.err")"
	done
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
			perf "m$mtu-bw-r$i" write_bw -s 65536 -D "$dur" -Q 100
			perf "m$mtu-bwq1-r$i" write_bw -s 65536 -D "$dur" -Q 1
		else
			perf "m$mtu-bwq1-r$i" write_bw -s 65536 -D "$dur" -Q 1
			perf "m$mtu-bw-r$i" write_bw -s 65536 -D "$dur" -Q 100
			iperf "m$mtu-tcp-r$i"
		fi
	done
	iperf "m$mtu-udp64" -u -l 64 -b 0
	perf "m$mtu-rate" write_bw -s 64 -n "$rate_iters"
	perf "m$mtu-rate-l16" write_bw -s 64 -n "$((4 * rate_iters))" -l 16
	perf "m$mtu-rate-l16-t512" write_bw -s 64 -n "$((4 * rate_iters))" -l 16 -t 512
	sockperf_pp "m$mtu-sockperf"
	perf "m$mtu-lat" write_lat -s 8 -n "$lat_iters"
	netns_pair_down "$nsa" "$nsb"
}

# goroce_figures VARIANT MTU: sets the g_* figures of goroce-perf's runs
# with GOMAXPROCS setting VARIANT at link MTU MTU.
goroce_figures() {
	local pre i f
	pre=$raw/$(vname "$1")-m$2
	local mbs=() cpu=() p50s=() p9999s=() mbs1=() cpu1=()
	for ((i = 1; i <= rounds; i++)); do
		f=$pre-bw-r$i
		mbs+=("$(jqf "$f.client.json" '.bw_average')")
		cpu+=("$(both_cpu "$f")")
		p50s+=("$(jqf "$f.client.json" '.p50_usec')")
		p9999s+=("$(jqf "$f.client.json" '.p99_99_usec')")
		f=$pre-bwq1-r$i
		mbs1+=("$(jqf "$f.client.json" '.bw_average')")
		cpu1+=("$(both_cpu "$f")")
	done
	g_mbs=$(printf '%s\n' "${mbs[@]}" | grep . | median)
	g_cpu=$(printf '%s\n' "${cpu[@]}" | grep . | median)
	g_mbs1=$(printf '%s\n' "${mbs1[@]}" | grep . | median)
	g_cpu1=$(printf '%s\n' "${cpu1[@]}" | grep . | median)
	g_p50=$(printf '%s\n' "${p50s[@]}" | grep . | median)
	g_p9999=$(printf '%s\n' "${p9999s[@]}" | grep . | median)
	g_rate=$(jqf "$pre-rate.client.json" '.msg_rate_mpps')
	g_rate16=$(jqf "$pre-rate-l16.client.json" '.msg_rate_mpps')
	g_rate16d=$(jqf "$pre-rate-l16-t512.client.json" '.msg_rate_mpps')
	g_l50=$(jqf "$pre-lat.client.json" '.t_typical_usec')
	g_l999=$(jqf "$pre-lat.client.json" '.p99_9_usec')
	g_mtu=$(jqf "$pre-bw-r1.client.json" '.mtu')
}

# both_cpu PREFIX: the CPU seconds per GB of both ends of a goroce-perf
# run, "" if either is missing.
both_cpu() {
	awk -v a="$(jqf "$1.client.json" '.cpu_sec_per_gb')" -v b="$(jqf "$1.server.json" '.cpu_sec_per_gb')" \
		'BEGIN { if (a != "" && b != "") print a + b }'
}

# report MTU: one block of the markdown table: a row per measure, with a
# goroce column and a ratio column per GOMAXPROCS variant.
report() {
	local m=$1 f i v
	local tcp_mbs=() tcp_cpu=()
	for ((i = 1; i <= rounds; i++)); do
		f=$raw/m$m-tcp-r$i.json
		# MB/s (2^20, as perftest's MB/sec) and CPU s/GB of both ends
		tcp_mbs+=("$(jqf "$f" '.end.sum_received.bytes / .end.sum_received.seconds / 1048576')")
		tcp_cpu+=("$(jqf "$f" '(.end.cpu_utilization_percent.host_total + .end.cpu_utilization_percent.remote_total) / 100 * .end.sum_received.seconds / (.end.sum_received.bytes / 1e9)')")
	done
	local tm tc udp sp50 sp999
	tm=$(printf '%s\n' "${tcp_mbs[@]}" | grep . | median)
	tc=$(printf '%s\n' "${tcp_cpu[@]}" | grep . | median)
	udp=$(jqf "$raw/m$m-udp64.json" '(.end.sum.packets - .end.sum.lost_packets) / .end.sum.seconds / 1e6')
	sp50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$raw/m$m-sockperf.log" 2>/dev/null | head -1)
	sp999=$(sed -n 's/.*percentile 99.900 = *\([0-9.]*\).*/\1/p' "$raw/m$m-sockperf.log" 2>/dev/null | head -1)
	# The rows are built a variant at a time: goroce's cells, the
	# kernel's cell, then the ratio cells.
	local -a cells=("" "" "" "" "" "" "" "" "" "") ratios=("" "" "" "" "" "" "" "" "" "")
	local mtu_used=""
	for v in "${variants[@]}"; do
		goroce_figures "$v" "$m"
		mtu_used=${mtu_used:-$g_mtu}
		cells[0]+=" $(fmt "$g_mbs") |"
		ratios[0]+=" **$(ratio "$g_mbs" "$tm")×** |"
		cells[1]+=" $(fmt "$g_cpu" %.2f) |"
		ratios[1]+=" $(ratio "$g_cpu" "$tc")× |"
		cells[2]+=" $(fmt "$g_p50") / $(fmt "$g_p9999") |"
		ratios[2]+=" p99.99 = $(ratio "$g_p9999" "$g_p50")× p50 |"
		cells[3]+=" $(fmt "$g_mbs1") |"
		ratios[3]+=" $(ratio "$g_mbs1" "$tm")× |"
		cells[4]+=" $(fmt "$g_cpu1" %.2f) |"
		ratios[4]+=" $(ratio "$g_cpu1" "$tc")× |"
		cells[5]+=" $(fmt "$g_rate" %.3f) |"
		ratios[5]+=" **$(ratio "$g_rate" "$udp")×** |"
		cells[6]+=" $(fmt "$g_rate16" %.3f) |"
		ratios[6]+=" $(ratio "$g_rate16" "$udp")× |"
		cells[7]+=" $(fmt "$g_rate16d" %.3f) |"
		ratios[7]+=" $(ratio "$g_rate16d" "$udp")× |"
		cells[8]+=" $(fmt "$g_l50" %.1f) |"
		ratios[8]+=" $(ratio "$g_l50" "$sp50")× |"
		cells[9]+=" $(fmt "$g_l999" %.1f) |"
		ratios[9]+=" $(ratio "$g_l999" "$sp999")× |"
	done
	local names=("64 KiB WRITE (-Q 100) vs TCP, MB/s" "CPU s/GB, both ends" "per-message p50 / p99.99, µs (goroce)"
		"same, every WRITE signaled (-Q 1), MB/s" "CPU s/GB, both ends (-Q 1)"
		"64 B messages, M/s: one per post vs UDP" "64 B messages, M/s: lists of 16 vs UDP"
		"same, send queue 512 deep (-t 512)" "latency p50, µs (write_lat 8 B vs sockperf UDP)" "latency p99.9, µs")
	local kernel=("$(fmt "$tm")" "$(fmt "$tc" %.2f)" "" "$(fmt "$tm")" "$(fmt "$tc" %.2f)" "$(fmt "$udp" %.3f)" "$(fmt "$udp" %.3f)" "$(fmt "$udp" %.3f)"
		"$(fmt "$sp50" %.1f)" "$(fmt "$sp999" %.1f)")
	for i in "${!names[@]}"; do
		local first="| |"
		((i == 0)) && first="| $m (IB MTU ${mtu_used:--}) |"
		printf '%s %s |%s %s |%s\n' "$first" "${names[$i]}" "${cells[$i]}" "${kernel[$i]}" "${ratios[$i]}"
	done
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
	local v head="| link MTU | |" rule="|---|---|" rhead="" rrule=""
	for v in "${variants[@]}"; do
		head+=" goroce, GOMAXPROCS $v |"
		rule+="---|"
		rhead+=" ratio ($v) |"
		rrule+="---|"
	done
	printf '%s kernel |%s\n%s---|%s\n' "$head" "$rhead" "$rule" "$rrule"
	for m in $mtus; do
		report "$m"
	done
	printf '\nGoals (issue 17): WRITE/TCP >= 1.0 at MTU 9000 and >= 0.8 at 1500, CPU ratio <= 1 (the -Q 100 rows); p99.99 <= 10x p50;\n'
	printf 'one-per-post rate >= 1.5x UDP, lists >= 2 M/s. Raw outputs: %s\n' "$raw"
}

main "$@"
