#!/usr/bin/env bash
# The main job. For now: decode and check the real Linux rxe captures that ship
# beside the repository with goroce-dump (the RC transport turns this into a
# loopback benchmark between two devices).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
captures=${CAPTURES:-../shared/rxe-vm/captures}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/goroce-dump" ./cmd/goroce-dump

# Every capture of rxe traffic: one line per RoCEv2 packet, then the check.
real=$(ls "$captures"/*.pcap | grep -v host_crafted_probe)
"$bin/goroce-dump" "$@" $real
"$bin/goroce-dump" --check $real | tail -n 1

# host_crafted_probe.pcap holds 6 packets with a deliberately bad ICRC (a
# flipped bit, and a kernel-chosen IP id): goroce-dump must flag exactly those.
echo "== host_crafted_probe.pcap (6 bad ICRCs on purpose)"
"$bin/goroce-dump" "$captures/host_crafted_probe.pcap" || true
