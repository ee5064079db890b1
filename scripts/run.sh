#!/usr/bin/env bash
# The main job on a fresh machine: builds `mu` and runs `mu demo`, a replicated key-value cluster
# of three processes on the embedded shared-memory fabric (its leader is killed halfway). Needs
# no root and no system package: where the system's libfabric (Debian libfabric-dev) is missing,
# `mu` is built without its libfabric fabric, which the demo does not use.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install Rust (https://rustup.rs) and run again" >&2
  exit 1
fi
features=()
if ! { [ -f /usr/include/rdma/fabric.h ] && ldconfig -p 2>/dev/null | grep -q 'libfabric\.so\.1'; }; then
  echo "run.sh: libfabric-dev is not installed: building mu without its libfabric fabric" \
    "(scripts/install-fabric-deps.sh installs it)" >&2
  features=(--no-default-features --features bench)
fi
cargo build --release --bin mu "${features[@]}"
exec ./target/release/mu demo "$@"
