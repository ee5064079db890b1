#!/usr/bin/env bash
# The main job on a fresh machine: builds `mu` and runs it on the embedded shared-memory fabric.
# Today that is the fabric benchmark across processes; the replicated cluster demo (`mu demo`)
# takes its place when the Mu engine lands (see README.md, "Status").
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install Rust (https://rustup.rs) and run again" >&2
  exit 1
fi
cargo build --release --bin mu
exec ./target/release/mu bench fabric "$@"
