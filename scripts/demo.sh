#!/usr/bin/env bash
# The main job: a loopback benchmark between two goroce devices in one process
# (127.0.0.1 and 127.0.0.2, an RC QP pair connected with cm): RDMA WRITE, READ
# and SEND bandwidth, 8-byte WRITE latency, CPU per GB, registration cost.
# Arguments go to goroce-bench, e.g. -d 5s -sizes 4K,64K,1M, or -json.
#
# Then, unless NO_CAPTURES=1 or -json was asked for, a one-line check of the real Linux rxe captures
# beside the repository with goroce-dump (every ICRC must match), and of the
# capture with 6 deliberately bad ICRCs, which goroce-dump must flag.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
go run ./cmd/goroce-bench "$@"

captures=${CAPTURES:-../shared/rxe-vm/captures}
case " $* " in *" -json "* | *" --json "* | *" -json=true "*) NO_CAPTURES=1 ;; esac
if [ "${NO_CAPTURES:-}" = 1 ] || [ ! -d "$captures" ]; then
  exit 0
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/goroce-dump" ./cmd/goroce-dump
echo
echo "== rxe captures in $captures, decoded by goroce-dump"
real=$(ls "$captures"/*.pcap | grep -v host_crafted_probe)
"$bin/goroce-dump" --check $real | tail -n 1
echo "== host_crafted_probe.pcap (6 bad ICRCs on purpose: FAIL expected)"
"$bin/goroce-dump" --check "$captures/host_crafted_probe.pcap" | tail -n 1 || true
