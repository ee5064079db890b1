#!/usr/bin/env bash
# The linearizability checker (tools/lincheck, Go, porcupine): vet, test and build it, or check
# one history. Works on a fresh machine: installs Go if it is missing and fetches the Go modules
# pinned in tools/lincheck/go.sum through the Go module proxy.
#
#   scripts/lincheck.sh                  vet, test, build target/lincheck/lincheck
#   scripts/lincheck.sh check FILE [..]  build if needed, then check one history (flags go on to
#                                        lincheck: --timeout 30s, --html out.html, --quiet)
#
# Exit status: non-zero when a step fails; for `check`, lincheck's own status (0 linearizable,
# 1 not linearizable, 2 bad input, 3 unknown: timed out).
# docs/verification/linearizability.md describes the history format and the checker.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
module="$root/tools/lincheck"
binary="$root/target/lincheck/lincheck"

step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'lincheck.sh: %s\n' "$*" >&2; exit 1; }

ensure_go() {
  if ! command -v go >/dev/null 2>&1; then
    for dir in /usr/local/go/bin /usr/lib/go/bin "$HOME/go/bin" "$HOME/.local/go/bin"; do
      if [ -x "$dir/go" ]; then
        export PATH="$dir:$PATH"
        break
      fi
    done
  fi
  if ! command -v go >/dev/null 2>&1; then
    step "installing Go (apt-get install golang-go)"
    command -v apt-get >/dev/null 2>&1 ||
      die "Go is not installed and there is no apt-get: install Go 1.19 or newer (https://go.dev/dl/)"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null 2>&1 || die "Go is not installed: run as root or install sudo"
      sudo="sudo"
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq golang-go >/dev/null
    command -v go >/dev/null 2>&1 || die "apt-get installed golang-go but go is still not on PATH"
  fi
  # Go needs a cache directory; give it one under target/ when there is no home to put it in.
  if [ -z "${HOME:-}" ] && [ -z "${GOCACHE:-}" ]; then
    export GOCACHE="$root/target/lincheck/go-cache" GOPATH="$root/target/lincheck/go-path"
  fi
  # Use the toolchain found here rather than downloading the one go.mod names (the module asks
  # only for Go 1.19), and check downloads against go.sum without rewriting it.
  export GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly"
}

build() {
  step "building target/lincheck/lincheck"
  mkdir -p "$(dirname "$binary")"
  (cd "$module" && go build -o "$binary" .)
  echo "built $binary" >&2
}

# up_to_date: the binary exists and is newer than every file of the module.
up_to_date() {
  [ -x "$binary" ] || return 1
  [ -z "$(find "$module" -type f -newer "$binary" -print -quit)" ]
}

case "${1:-}" in
  check)
    shift
    [ "$#" -ge 1 ] || die "usage: scripts/lincheck.sh check FILE [--timeout 30s] [--html out.html]"
    if ! up_to_date; then
      ensure_go
      step "fetching Go modules (go.sum pins porcupine v1.3.1)"
      (cd "$module" && go mod download)
      build
    fi
    # Not exec: keep lincheck's exit status as this script's, whatever the shell options.
    status=0
    "$binary" "$@" || status=$?
    exit "$status"
    ;;
  "" | all)
    ensure_go
    step "Go toolchain"
    go version
    step "fetching Go modules (go.sum pins porcupine v1.3.1)"
    (cd "$module" && go mod download && go mod verify)
    step "gofmt"
    unformatted="$(cd "$module" && gofmt -l .)"
    [ -z "$unformatted" ] || die "files need gofmt: $unformatted"
    step "go vet"
    (cd "$module" && go vet ./...)
    step "go test (includes a 100,000-operation history and a deliberately corrupted one)"
    (cd "$module" && go test -count=1 ./...)
    build
    step "smoke run: a linearizable and a corrupted history through the binary"
    "$binary" --quiet "$module/testdata/linearizable_concurrent.json"
    status=0
    "$binary" --quiet "$module/testdata/not_linearizable_overwritten_read.json" || status=$?
    [ "$status" -eq 1 ] || die "the corrupted history gave exit status $status, want 1"
    echo "lincheck: all checks passed" >&2
    ;;
  -h | --help | help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    die "unknown command '$1' (want no argument, check FILE, or --help)"
    ;;
esac
