#!/usr/bin/env bash
# The test command: unit, property, simulation and fuzz-seed tests, with the
# race detector. Pass -short to skip the slower cases; extra args go to go test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
go test -race -count=1 -timeout 15m "$@" ./...
