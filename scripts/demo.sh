#!/usr/bin/env bash
# The main job. For now: decode and check the real Linux rxe captures that ship
# beside the repository with goroce-dump (the RC transport issue turns this into
# a loopback benchmark between two devices).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
captures=${CAPTURES:-../shared/rxe-vm/captures}
go run ./cmd/goroce-dump "$@" "$captures"/*.pcap
go run ./cmd/goroce-dump --check "$captures"/*.pcap | tail -n 1
