#!/usr/bin/env bash
# bench/rstream.sh: a byte stream over goroce (package rsocket, through
# goroce-rstream) against the kernel's loopback TCP (goroce-rstream -T s,
# the same program and test over net.Conn on TCP), side by side (issue 18).
#
#   bench/rstream.sh          # no root needed; about a minute
#
# For each test, BENCH_ROUNDS rounds of each transport, alternating: a
# server and a client process of goroce-rstream on loopback addresses, each
# timed by bash (user + system CPU seconds). It prints a markdown table:
# rstream's figures (Gb/s, µs per transfer: one transfer one way) as the
# median of the rounds, and the CPU seconds of both processes per GB moved
# (for the ping-pong, CPU µs per transfer). Connection setup, buffer
# registration and the devices' start are inside the timed processes'
# CPU, not inside rstream's time.
#
# Environment (defaults in brackets):
#   BENCH_NET [0]      third octet of the loopback addresses: 127.0.N.2
#                      (server) and .3 (client)
#   BENCH_ROUNDS [3]   rounds per test and transport
#   BENCH_PORT [17471] the rdma_cm / TCP port
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NET=${BENCH_NET:-0}
ROUNDS=${BENCH_ROUNDS:-3}
PORT=${BENCH_PORT:-17471}
SRV=127.0.$NET.2
CLI=127.0.$NET.3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PATH=/usr/local/go/bin:$PATH
(cd "$ROOT" && go build -o "$WORK/goroce-rstream" ./cmd/goroce-rstream)
RS=$WORK/goroce-rstream
TIMEFORMAT='%U %S'

# one TRANSPORT ARGS...: one round; prints "GBPS USEC CPU_SECONDS BYTES"
one() {
    local mode=$1
    shift
    local extra=()
    [ "$mode" = tcp ] && extra=(-T s)
    { time "$RS" -b "$SRV" -p "$PORT" "$@" "${extra[@]}" >"$WORK/srv.out"; } 2>"$WORK/srv.cpu" &
    local spid=$!
    for _ in $(seq 1 100); do
        grep -q '^name' "$WORK/srv.out" 2>/dev/null && break
        sleep 0.05
    done
    { time "$RS" -s "$SRV" -b "$CLI" -p "$PORT" "$@" "${extra[@]}" >"$WORK/cli.out"; } 2>"$WORK/cli.cpu"
    wait "$spid"
    awk -v s="$(cat "$WORK/srv.cpu")" -v c="$(cat "$WORK/cli.cpu")" '
        /^custom/ { split(s, a, " "); split(c, b, " ")
            print $(NF-1), $NF, a[1] + a[2] + b[1] + b[2] }' "$WORK/cli.out"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "| test | transport | Gb/s | µs per transfer | CPU (both processes) |"
echo "|---|---|---|---|---|"
for t in "64 B ping-pong|-S 64 -C 1 -I 20000" "64 KiB stream|-S 65536 -C 4000" "1 MiB stream|-S 1048576 -C 200"; do
    name=${t%%|*}
    read -r -a args <<<"${t#*|}"
    : >"$WORK/rdma.rows"
    : >"$WORK/tcp.rows"
    for _ in $(seq 1 "$ROUNDS"); do
        for mode in rdma tcp; do
            one "$mode" "${args[@]}" >>"$WORK/$mode.rows"
        done
    done
    for mode in rdma tcp; do
        gbps=$(awk '{ print $1 }' "$WORK/$mode.rows" | median)
        usec=$(awk '{ print $2 }' "$WORK/$mode.rows" | median)
        cpu=$(awk '{ print $3 }' "$WORK/$mode.rows" | median)
        # bytes moved: both directions (rstream's total)
        case $name in
        "64 B ping-pong") per=$(awk -v c="$cpu" 'BEGIN { printf "%.1f µs per transfer", c * 1e6 / (2 * 20000) }') ;;
        "64 KiB stream") per=$(awk -v c="$cpu" 'BEGIN { printf "%.2f s per GB", c / (2 * 4000 * 65536 / 1e9) }') ;;
        *) per=$(awk -v c="$cpu" 'BEGIN { printf "%.2f s per GB", c / (2 * 200 * 1048576 / 1e9) }') ;;
        esac
        label=goroce-rsocket
        [ "$mode" = tcp ] && label="TCP (-T s)"
        echo "| $name | $label | $gbps | $usec | $per |"
    done
done
echo
echo "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
