#!/usr/bin/env bash
# Fetches and builds what the simulator's gophercloud checks
# (tests/conformance/gophercloud, run by
# adapters/sim/openstack/tests/gophercloud_conformance.rs) need: the modules
# their go.mod and go.sum pin, from the Go module proxy, into a module cache
# of their own, and the test binary's packages into a build cache beside it,
# both under ~/.cache/server-controller/gophercloud/ (GOPHERCLOUD_CACHE
# overrides it; the Rust test reads the same place). Uses the machine's Go
# (GOTOOLCHAIN=local). Idempotent; quiet when the caches are warm.
set -euo pipefail
cd "$(dirname "$0")/../tests/conformance/gophercloud"

cache=${GOPHERCLOUD_CACHE:-$HOME/.cache/server-controller/gophercloud}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
export GOMODCACHE="$cache/mod" GOCACHE="$cache/build"

started=$(date +%s)
go mod download
# Compiles the checks without running any (they need a simulator).
go test -count=1 -run '^$' ./... >/dev/null
elapsed=$(($(date +%s) - started))
if [ "$elapsed" -gt 2 ]; then
  echo "deps-gophercloud: $(go env GOVERSION), $(go list -m github.com/gophercloud/gophercloud/v2) cached in $cache in $elapsed s" >&2
fi
