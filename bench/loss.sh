#!/usr/bin/env bash
# bench/loss.sh: throughput under random loss on a veth path (issue 19's
# sweep): goroce with IBTA go-back-N, goroce with selective repeat (both
# ends agree, goroce-perf --selective-repeat) and the kernel's TCP, on the
# same path in the same run.
#
#   sudo bench/loss.sh          # as root (namespaces, iptables); installs iperf3, jq
#
# Two network namespaces joined by a veth pair (link MTU 4200: the port's
# IB MTU is 4096). For each loss rate an iptables rule in INPUT of both
# namespaces drops that fraction of every packet arriving on the veth (-m
# statistic --mode random), so both directions lose, data and ACKs alike,
# and so does TCP. Each round runs iperf3 (one TCP stream), goroce-perf
# write_bw with 64 KiB WRITEs on one QP, and the same with selective
# repeat, in an order that rotates from round to round. The report gives
# the median MB/s of each and its share of the lossless median: for TCP
# its own, for goroce the better of its two modes' (the lossless 64 KiB
# WRITE throughput the issue's goals speak of: at least 90 % of it at 1 %
# loss and 60 % at 5 %).
#
# Environment (defaults in brackets):
#   BENCH_LOSSES [0 0.001 0.01 0.05]  drop probabilities, 0 first
#   BENCH_LOSS_MTU [4200]             link MTU
#   BENCH_DURATION [5]                seconds of each run
#   BENCH_ROUNDS [3]                  rounds per loss rate
#   BENCH_LOSS_RAW [a temporary directory]  raw outputs
#   BENCH_PERF                        a goroce-perf binary (default: built here)
#   BENCH_NO_INSTALL                  set to skip apt-get
set -uo pipefail # not -e: netns-pair.sh's teardown tolerates what is not there

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/netns-pair.sh
. "$root/bench/netns-pair.sh"

losses=${BENCH_LOSSES:-0 0.001 0.01 0.05}
mtu=${BENCH_LOSS_MTU:-4200}
dur=${BENCH_DURATION:-5}
rounds=${BENCH_ROUNDS:-3}
raw=${BENCH_LOSS_RAW:-$(mktemp -d /tmp/goroce-loss.XXXXXX)}
nsa=glossA nsb=glossB ipa=10.252.0.1 ipb=10.252.0.2
iperf_port=15272
modes=(tcp gbn sr)

log() { printf 'loss: %s\n' "$*" >&2; }

inA() { ip netns exec "$nsa" "$@"; }
inB() { ip netns exec "$nsb" "$@"; }

# set_loss P: drop the fraction P of the packets arriving on the veth, in
# both namespaces (none for 0).
set_loss() {
	local ns dev
	for ns in "$nsa" "$nsb"; do
		dev=veth-$ns
		dev=${dev:0:15}
		ip netns exec "$ns" iptables -F INPUT || return 1
		if [[ $1 != 0 ]]; then
			ip netns exec "$ns" iptables -A INPUT -i "$dev" \
				-m statistic --mode random --probability "$1" -j DROP || return 1
		fi
	done
}

# run_mode MODE NAME: one run of MODE (tcp, gbn, sr); raw output in
# $raw/NAME.json (the client's).
run_mode() {
	local mode=$1 name=$2 srv extra=()
	case $mode in
	tcp)
		inB iperf3 -s -1 -B "$ipb" -p "$iperf_port" >"$raw/$name.server.log" 2>&1 &
		srv=$!
		sleep 0.5
		inA timeout $((dur + 60)) iperf3 -c "$ipb" -B "$ipa" -p "$iperf_port" -t "$dur" -J >"$raw/$name.json" ||
			log "iperf3 ($name) failed"
		wait "$srv" || true
		;;
	gbn | sr)
		[[ $mode == sr ]] && extra=(--selective-repeat)
		inB timeout $((dur + 120)) "$P" write_bw -s 65536 -D "$dur" "${extra[@]}" --bind "$ipb" --json \
			>"$raw/$name.server.json" 2>"$raw/$name.server.err" &
		srv=$!
		sleep 1
		inA timeout $((dur + 120)) "$P" write_bw -s 65536 -D "$dur" "${extra[@]}" --bind "$ipa" --json "$ipb" \
			>"$raw/$name.json" 2>"$raw/$name.err" ||
			log "goroce-perf $mode ($name) failed: $(tail -1 "$raw/$name.err")"
		wait "$srv" || log "goroce-perf server $mode ($name) failed: $(tail -1 "$raw/$name.server.err")"
		;;
	esac
}

# mbs MODE FILE: the run's MB/s (2^20 bytes, as perftest's MB/sec).
mbs() {
	case $1 in
	tcp) jq -r '.end.sum_received.bytes / .end.sum_received.seconds / 1048576 // empty' "$2" 2>/dev/null | head -1 ;;
	*) jq -r '.bw_average // empty' "$2" 2>/dev/null | head -1 ;;
	esac
}

median() { bench_median; }
share() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.0f %%", 100 * a / b }'; }
fmt() { bench_fmt "$@"; }

main() {
	[[ $(id -u) == 0 ]] || { log "needs root (namespaces, iptables)"; exit 1; }
	bench_install iperf3 jq iptables
	mkdir -p "$raw"
	if [[ -n ${BENCH_PERF:-} ]]; then
		P=$BENCH_PERF
	else
		log "building goroce-perf"
		(cd "$root" && go build -o "$raw/goroce-perf" ./cmd/goroce-perf) || exit 1
		P=$raw/goroce-perf
	fi
	trap 'netns_pair_down "$nsa" "$nsb"' EXIT
	netns_pair_up "$nsa" "$nsb" "$ipa" "$ipb" "$mtu" || exit 1
	local load0 p r i m
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	for p in $losses; do
		set_loss "$p" || { log "cannot install the iptables rule (-m statistic)"; exit 1; }
		for ((r = 1; r <= rounds; r++)); do
			for ((i = 0; i < ${#modes[@]}; i++)); do
				m=${modes[$(((i + r - 1) % ${#modes[@]}))]}
				log "loss $p round $r: $m"
				run_mode "$m" "p$p-$m-r$r"
			done
		done
	done
	set_loss 0
	declare -A med base
	for p in $losses; do
		for m in "${modes[@]}"; do
			med[$p.$m]=$(for ((r = 1; r <= rounds; r++)); do mbs "$m" "$raw/p$p-$m-r$r.json"; done | grep . | median)
			[[ -z ${base[$m]:-} ]] && base[$m]=${med[$p.$m]}
		done
	done
	# goroce's lossless throughput: the better of its two modes
	base[gbn]=$(printf '%s\n' "${base[gbn]}" "${base[sr]}" | grep -v '^-$' | sort -g | tail -1)
	base[gbn]=${base[gbn]:--}
	base[sr]=${base[gbn]}
	printf '### random loss on a veth pair, link MTU %s (load %s at the start, %s at the end; %s s runs, medians of %s rounds)\n\n' \
		"$mtu" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$dur" "$rounds"
	printf '| loss both ways | goroce go-back-N MB/s (share of goroce lossless) | goroce selective repeat | kernel TCP (share of TCP lossless) |\n|---|---|---|---|\n'
	for p in $losses; do
		printf '| %s %% |' "$(awk -v p="$p" 'BEGIN { print p * 100 }')"
		for m in gbn sr tcp; do
			printf ' %s (%s) |' "$(fmt "${med[$p.$m]}")" "$(share "${med[$p.$m]}" "${base[$m]}")"
		done
		printf '\n'
	done
	printf '\nGoals (issue 19, goroce between goroce peers): >= 90 %% of lossless at 1 %% loss, >= 60 %% at 5 %%.\n'
	printf 'Raw outputs: %s\n' "$raw"
}

main "$@"
