#!/usr/bin/env bash
# The main job on a fresh machine: builds `mu` and runs `mu demo`, a replicated key-value cluster
# of three processes on the embedded shared-memory fabric (its leader is killed halfway).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install Rust (https://rustup.rs) and run again" >&2
  exit 1
fi
# `mu` links libfabric (its ofi fabric backend): the Debian package libfabric-dev.
bash scripts/install-fabric-deps.sh
cargo build --release --bin mu
exec ./target/release/mu demo "$@"
