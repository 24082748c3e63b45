#!/bin/bash
# test/libgoroce/bench.sh: perftest through libgoroce against goroce-perf
# on the same machine, in alternating rounds. goroce-perf runs in two shapes:
# a server and a client process, as perftest's two programs (on 127.0.0.3
# and 127.0.0.4), and --loopback, both devices in one process, as the
# daemon holds both of perftest's.
#
#   test/libgoroce/bench.sh bw [ROUNDS]    ib_write_bw -D 5 vs goroce-perf write_bw -D 5,
#                                          with the daemon's CPU seconds per GB
#   test/libgoroce/bench.sh lat [ROUNDS]   ib_write_lat -n 20000 vs goroce-perf write_lat (two
#                                          processes parked and with --busy-poll, and --loopback)
#
# Needs perftest, gcc and libibverbs-dev. NICARGS passes flags to the daemon
# (e.g. "--poll 50us"). Devices on UDP port 24791 so as not to meet other
# RoCE software; loopback only.
set -u
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$HOME/go/bin:$PATH
mode=${1:-bw}
rounds=${2:-3}
work=$(mktemp -d)
nic=
trap '[ -n "$nic" ] && kill $nic; rm -rf "$work"' EXIT
go build -o "$work/goroce-nic" ./cmd/goroce-nic && go build -o "$work/goroce-perf" ./cmd/goroce-perf &&
	make -s -C libgoroce OUT="$work/libgoroce.so" || exit 1
export GOROCE_NIC_SOCKET="@goroce-bench-$$"
# shellcheck disable=SC2086
"$work/goroce-nic" --socket "$GOROCE_NIC_SOCKET" --port 24791 ${NICARGS:-} >"$work/nic.log" 2>&1 &
nic=$!
sleep 0.5
tck=$(getconf CLK_TCK)
if [ "$mode" = bw ]; then
	gp=(write_bw -D 5)
	pt=(ib_write_bw -D 5)
else
	gp=(write_lat -n 20000)
	pt=(ib_write_lat -n 20000)
fi
# gp2 OUT [FLAGS...]: goroce-perf as a server and a client process.
gp2() {
	local out=$1 s
	shift
	"$work/goroce-perf" "${gp[@]}" "$@" --bind 127.0.0.3 -p 19997 >"$out.srv" 2>&1 &
	s=$!
	for _ in $(seq 100); do ss -Htln "sport = :19997" | grep -q . && break; sleep 0.05; done
	"$work/goroce-perf" "${gp[@]}" "$@" --bind 127.0.0.4 -p 19997 127.0.0.3 >"$out" 2>&1
	wait $s
}
for r in $(seq "$rounds"); do
	"$work/goroce-perf" "${gp[@]}" --loopback >"$work/gp.out" 2>&1
	gp2 "$work/gp2.out"
	# perftest's latency tests spin on memory; goroce-perf's spin too with
	# --busy-poll (and take their packets from the socket themselves).
	[ "$mode" = bw ] || gp2 "$work/gp3.out" --busy-poll
	c0=$(awk '{print $14+$15}' /proc/$nic/stat)
	LD_PRELOAD="$work/libgoroce.so" timeout 120 "${pt[@]}" -d goroce0 -x 1 -p 19996 >"$work/srv.out" 2>&1 &
	s=$!
	for _ in $(seq 100); do ss -Htln "sport = :19996" | grep -q . && break; sleep 0.05; done
	LD_PRELOAD="$work/libgoroce.so" timeout 120 "${pt[@]}" -d goroce1 -x 1 -p 19996 127.0.0.1 >"$work/cli.out" 2>&1
	wait $s
	c1=$(awk '{print $14+$15}' /proc/$nic/stat)
	load=$(cut -d' ' -f1 /proc/loadavg)
	if [ "$mode" = bw ]; then
		a=$(grep -A1 "#bytes     #iter" "$work/gp.out" | sed -n 2p | awk '{print $4}')
		acpu=$(grep -A1 'CPU\[sec/GB\]' "$work/gp.out" | sed -n 2p | awk '{print $3}')
		a2=$(grep -A1 "#bytes     #iter" "$work/gp2.out" | sed -n 2p | awk '{print $4}')
		read -r it b < <(grep -A1 "#bytes" "$work/cli.out" | sed -n 2p | awk '{print $2, $4}')
		dcpu=$(awk -v i="$it" -v c0="$c0" -v c1="$c1" -v t="$tck" 'BEGIN{if (i>0) printf "%.2f", (c1-c0)/t/(i*65536/1e9); else print "-"}')
		echo "round $r: goroce-perf two processes $a2 MB/s, --loopback $a MB/s ($acpu CPU s/GB); ib_write_bw via libgoroce $b MB/s (daemon $dcpu CPU s/GB); load $load"
	else
		a=$(grep -A1 "#bytes" "$work/gp.out" | sed -n 2p | awk '{print $5}')
		a2=$(grep -A1 "#bytes" "$work/gp2.out" | sed -n 2p | awk '{print $5}')
		a3=$(grep -A1 "#bytes" "$work/gp3.out" | sed -n 2p | awk '{print $5}')
		b=$(grep -A1 "#bytes" "$work/cli.out" | sed -n 2p | awk '{print $5}')
		echo "round $r: t_typical goroce-perf two processes $a2 us (--busy-poll $a3 us), --loopback $a us; ib_write_lat via libgoroce $b us; load $load"
	fi
done
