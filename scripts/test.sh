#!/usr/bin/env bash
# The test command: unit, property, simulation and fuzz-seed tests, with the
# race detector, then the netio and verbs tests again with fault injection
# built in (-tags goroce_faults), the socket path of other platforms
# (-tags goroce_portable), the Prometheus exporter's module and the
# applications' (examples/apps). Pass -short to skip the slower cases; extra
# args go to go test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
go test -race -count=1 -timeout 15m "$@" ./...
# The fault-injection tap exists only under the goroce_faults tag; its tests
# (and the packages' other tests, rebuilt with the tap) run here.
go test -race -count=1 -timeout 5m -tags goroce_faults "$@" ./internal/netio ./verbs
# The ICRC's AVX-512 fold (internal/wire/crc_amd64.s) is used where the CPU
# has it; the purego tag builds the hash/crc32 path other CPUs take.
go test -count=1 -timeout 5m -tags purego "$@" ./internal/wire ./internal/netio
# The versioned-record test races the owner's CPU stores with remote READs
# on purpose, which the race detector reports (it is built without -race
# only): it runs here.
go test -count=1 -timeout 5m -run 'TestVersionedRecordHammer' "$@" ./verbs
# goroce-riostream watches the last byte of a buffer the peer's device
# stores into, as riostream does, which the race detector reports too.
go test -count=1 -timeout 5m -run 'TestCustomVerified' "$@" ./cmd/goroce-riostream
# The plain-UDP socket path that macOS, FreeBSD and Windows take, tested on
# Linux (see README "Platforms").
go test -race -count=1 -timeout 10m -tags goroce_portable "$@" ./internal/netio ./verbs ./cm
# The Prometheus exporter is a module of its own, which ./... above skips.
(cd prometheus && go test -race -count=1 -timeout 5m "$@" ./...)
# So are the applications over goroce (gRPC, net/http, the key-value
# store); the kv test of GETs racing PUTs races the server's stores with
# READs on purpose and runs without -race only (it is built so).
(cd examples/apps && go test -race -count=1 -timeout 5m "$@" ./... &&
	go test -count=1 -timeout 5m -run 'TestGetRacingPuts' "$@" ./kv)
