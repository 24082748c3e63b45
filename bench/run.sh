#!/usr/bin/env bash
# bench/run.sh: goroce against the kernel's TCP and UDP on this machine,
# side by side in one run (issue 7).
#
#   sudo bench/run.sh            # as root: installs iperf3 and sockperf
#
# It installs iperf3 and sockperf from the Debian archive, builds
# goroce-perf and goroce-scale, then measures over loopback:
#
#   1. bandwidth: iperf3 TCP, one stream, against goroce-perf write_bw with
#      64 KiB WRITEs on one QP (MTU 4096), with the CPU seconds per GB moved
#      of both (iperf3: its client's and server's CPU utilisation; goroce:
#      getrusage of its process, which runs both devices);
#   2. bandwidth against message size (goroce write_bw -a, plotted);
#   3. latency: sockperf UDP ping-pong (half round trips; blocking, and
#      busy-polling with --nonblocked) against goroce write_lat with 8-byte
#      messages (default waiting, and --busy-poll), p50 and p99.9, with a
#      latency CDF plot;
#   4. message rate: 8-byte WRITEs on 1, 4 and 16 QPs (Mpps), one WR per
#      post and lists of 16 (-l 16);
#   5. scale: goroce-scale (10,000 connected QP pairs, memory per QP and per
#      MR, registration rate, WRITE throughput with 1,000 active QPs against
#      one).
#   6. the bandwidth, message rate and latency comparisons again across a
#      veth pair between two network namespaces at link MTU 1500 and 9000
#      (bench/veth.sh, which also runs on its own), the path a NIC has.
#
# and writes bench/results/DATE.md (a markdown table with the ratios the
# issue asks for and the machine's description) and, beside it, DATE/ with
# every raw output and the plots (SVG). Running it again the same day
# replaces that day's results. It takes about 6 to 8 minutes (the veth part 2.5).
#
# Environment (defaults in brackets):
#   BENCH_NET [0]          third octet of the loopback addresses used:
#                          127.0.N.1 and .2 for goroce, .3 and .4 for the
#                          kernel tools (pick another N when 127.0.0.x is busy)
#   BENCH_DURATION [5]     seconds of each bandwidth run
#   BENCH_ROUNDS [3]       rounds of the bandwidth and latency comparisons
#   BENCH_LAT_ITERS [100000]  round trips of the goroce latency run
#   BENCH_RATE_ITERS [20000]  WRITEs per QP in the message rate runs
#   BENCH_ALL_ITERS [1000]    iterations per size in the -a run
#   BENCH_BUSY_ITERS [20000] BENCH_BUSY_TIMEOUT [60]  the --busy-poll latency run
#   BENCH_SCALE_QPS [10000] BENCH_SCALE_MRS [1000000] BENCH_SCALE_ACTIVE [1000]
#   BENCH_OUT [bench/results]  where the results go
#   BENCH_NO_INSTALL       set to skip apt-get (the tools must be installed)
#   BENCH_VETH [1]         0 skips the veth part (step 6); BENCH_VETH_MTUS [1500 9000]
#
# Quick run (about a minute): BENCH_DURATION=2 BENCH_LAT_ITERS=5000 BENCH_RATE_ITERS=5000
# BENCH_ALL_ITERS=50 BENCH_SCALE_QPS=1000 BENCH_SCALE_MRS=10000 bench/run.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
net=${BENCH_NET:-0}
g1=127.0.$net.1 g2=127.0.$net.2 k1=127.0.$net.3 k2=127.0.$net.4
dur=${BENCH_DURATION:-5}
rounds=${BENCH_ROUNDS:-3}
lat_iters=${BENCH_LAT_ITERS:-100000}
rate_iters=${BENCH_RATE_ITERS:-20000}
all_iters=${BENCH_ALL_ITERS:-1000}
scale_qps=${BENCH_SCALE_QPS:-10000}
scale_mrs=${BENCH_SCALE_MRS:-1000000}
scale_active=${BENCH_SCALE_ACTIVE:-1000}
outdir=${BENCH_OUT:-$root/bench/results}
day=$(date -u +%Y-%m-%d)
raw=$outdir/$day
# TCP ports of the kernel tools and of goroce-perf's out-of-band exchange.
iperf_port=$((15200 + net)) sockperf_port=$((15500 + net))

log() { printf 'bench: %s\n' "$*" >&2; }

build() {
	log "building goroce-perf and goroce-scale"
	mkdir -p "$raw/bin"
	(cd "$root" && go build -o "$raw/bin/" ./cmd/goroce-perf ./cmd/goroce-scale)
}

# perf runs goroce-perf in loopback mode (both devices in one process)
# with JSON output into $raw/NAME.json; the last argument may not be
# a flag that takes a value.
perf() {
	local name=$1
	shift
	log "goroce-perf $*"
	timeout "${BENCH_TIMEOUT:-300}" "$raw/bin/goroce-perf" "$@" --loopback --loopback-addrs "$g1,$g2" -p 0 --json \
		>"$raw/$name.json" 2>"$raw/$name.err" || {
		log "goroce-perf $* failed: $(tail -1 "$raw/$name.err")"
		return 0
	}
}

# run_iperf3 NAME runs iperf3 TCP, one stream, into $raw/NAME.json.
run_iperf3() {
	local name=$1
	log "iperf3 TCP, one stream, ${dur} s"
	iperf3 -s -1 -B "$k1" -p "$iperf_port" >"$raw/$name-server.log" 2>&1 &
	local srv=$!
	sleep 0.5
	timeout $((dur + 30)) iperf3 -c "$k1" -B "$k2" -p "$iperf_port" -t "$dur" -J >"$raw/$name.json" ||
		log "iperf3 failed"
	wait "$srv" || true
}

# run_sockperf NAME ARGS... runs one sockperf ping-pong (14-byte messages,
# sockperf's minimum: its header) against a server started with the same
# ARGS.
run_sockperf() {
	local name=$1
	shift
	log "sockperf ping-pong $* (${dur} s)"
	local server_args=("$@")
	if [[ ${1:-} == --full-log ]]; then
		server_args=("${@:3}") # the log is the client's
	fi
	sockperf server -i "$k1" -p "$sockperf_port" "${server_args[@]}" >"$raw/$name-server.log" 2>&1 &
	local srv=$!
	sleep 0.5
	timeout $((dur + 30)) sockperf ping-pong -i "$k1" -p "$sockperf_port" -m 14 -t "$dur" "$@" \
		>"$raw/$name.log" 2>&1 || log "sockperf $* failed"
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}

machine() {
	{
		printf 'cpu=%s\n' "$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
		printf 'cpus=%s\n' "$(nproc)"
		printf 'threads_per_core=%s\n' "$(lscpu | sed -n 's/^Thread(s) per core: *//p')"
		printf 'hypervisor=%s\n' "$(lscpu | sed -n 's/^Hypervisor vendor: *//p')"
		printf 'mem_mib=%s\n' "$(free -m | awk '/^Mem:/ {print $2}')"
		printf 'kernel=%s\n' "$(uname -r)"
		printf 'go=%s\n' "$(go version | awk '{print $3}')"
		# shellcheck source=/dev/null
		printf 'os=%s\n' "$(. /etc/os-release && echo "$PRETTY_NAME")"
		printf 'iperf3=%s\n' "$(iperf3 --version | head -1)"
		printf 'sockperf=%s\n' "$(sockperf --version 2>&1 | sed -n 's/.*version *//p' | head -1)"
		printf 'load=%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
		printf 'commit=%s\n' "$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
		printf 'dirty=%s\n' "$(git -C "$root" status --porcelain -- . ':(exclude)bench/results' 2>/dev/null | grep -c .)"
	} >"$raw/machine.txt"
}

main() {
	bench_install iperf3 sockperf python3 jq
	rm -rf "${raw:?}"
	mkdir -p "$raw"
	machine
	build
	local start=$SECONDS

	# 1. Bandwidth and CPU cost: TCP against 64 KiB WRITEs, in rounds
	# that alternate which goes first; the report takes medians. On a
	# shared machine one pair of runs can differ by a third either way
	# from the next: the rounds show how much.
	local i
	for ((i = 1; i <= rounds; i++)); do
		if ((i % 2)); then
			run_iperf3 "iperf3_r$i"
			perf "write_bw_64k_r$i" write_bw -s 65536 -D "$dur"
		else
			perf "write_bw_64k_r$i" write_bw -s 65536 -D "$dur"
			run_iperf3 "iperf3_r$i"
		fi
	done
	# 2. Bandwidth against message size.
	perf write_bw_all write_bw -a -n "$all_iters" --plot "$raw/bw_vs_size.svg"
	# 3. Latency, in rounds as well; the first round's samples are
	# plotted. sockperf's per-message log, one half round trip (usec)
	# per line, is drawn beside goroce's in the latency CDF.
	for ((i = 1; i <= rounds; i++)); do
		local full=() plot=() ref=()
		if ((i == 1)); then
			full=(--full-log "$raw/sockperf_full.csv")
		fi
		run_sockperf "sockperf_r$i" "${full[@]}"
		if ((i == 1)); then
			awk -F', *' 'NF == 4 && $1 ~ /^[0-9]+$/ { print $4 }' "$raw/sockperf_full.csv" >"$raw/sockperf_lat.txt" 2>/dev/null || true
			if [[ -s $raw/sockperf_lat.txt ]]; then
				ref=(--plot-ref "sockperf=$raw/sockperf_lat.txt")
			fi
			plot=(--plot "$raw/latency_cdf.svg")
		fi
		perf "write_lat_r$i" write_lat -s 8 -n "$lat_iters" "${plot[@]}" "${ref[@]}"
		rm -f "$raw/sockperf_full.csv" "$raw/sockperf_lat.txt" # megabytes; the plot has them
	done
	run_sockperf sockperf_busy --nonblocked
	# Busy polling: both sides spin, and their polls receive the packets
	# themselves (DeviceConfig.BusyPoll), since no core is left for the
	# devices' receive goroutines. Bounded by a timeout all the same; the
	# report shows "-" when it does not finish.
	BENCH_TIMEOUT=${BENCH_BUSY_TIMEOUT:-60} perf write_lat_busy write_lat -s 8 -n "${BENCH_BUSY_ITERS:-20000}" --busy-poll
	# 4. Message rate.
	for q in 1 4 16; do
		perf "write_rate_q$q" write_bw -s 8 -n "$rate_iters" -q "$q"
		# The same with post lists of 16 (perftest's -l): one batch
		# of system calls per 16 work requests.
		perf "write_rate_q${q}_l16" write_bw -s 8 -n "$rate_iters" -q "$q" -l 16
	done
	# 5. Scale.
	log "goroce-scale -qps $scale_qps -mrs $scale_mrs -active $scale_active"
	timeout 600 "$raw/bin/goroce-scale" -qps "$scale_qps" -mrs "$scale_mrs" -active "$scale_active" \
		-duration "${dur}s" -addrs "$g1,$g2" -json >"$raw/scale.json" 2>"$raw/scale.err" ||
		log "goroce-scale failed: $(tail -1 "$raw/scale.err")"

	# 6. The same comparisons across a veth pair between two namespaces,
	# at link MTU 1500 and 9000 (bench/veth.sh; BENCH_VETH=0 skips it).
	if [[ ${BENCH_VETH:-1} != 0 ]]; then
		BENCH_PERF=$raw/bin/goroce-perf BENCH_VETH_RAW=$raw/veth BENCH_NO_INSTALL=1 \
			"$root/bench/veth.sh" >"$raw/veth.md" || log "bench/veth.sh failed"
	fi

	log "measured in $((SECONDS - start)) s; writing $outdir/$day.md"
	python3 "$root/bench/report.py" "$raw" "$day" >"$outdir/$day.md"
	if [[ -s $raw/veth.md ]]; then
		printf '\n' >>"$outdir/$day.md"
		cat "$raw/veth.md" >>"$outdir/$day.md"
	fi
	rm -rf "${raw:?}/bin"
	cat "$outdir/$day.md"
}

main "$@"
