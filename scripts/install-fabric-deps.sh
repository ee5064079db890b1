#!/usr/bin/env bash
# Installs what the libfabric backend (crates/fabric-ofi) needs to build and run: the Debian
# package libfabric-dev (headers, and libfabric1 with its sockets and tcp;ofi_rxm providers),
# and iproute2, whose `ip` the multi-host test uses to build its network namespaces.
# Idempotent: it does nothing when both are present.
set -euo pipefail

missing=()
if ! { [ -f /usr/include/rdma/fabric.h ] && ldconfig -p 2>/dev/null | grep -q 'libfabric\.so\.1'; }; then
  missing+=(libfabric-dev)
fi
if ! command -v ip >/dev/null 2>&1; then
  missing+=(iproute2)
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-fabric-deps: libfabric-dev and iproute2 already installed, nothing to do"
  exit 0
fi
sudo_prefix=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_prefix=(sudo)
  else
    echo "install-fabric-deps: not root and no sudo: install ${missing[*]} by hand" >&2
    exit 1
  fi
fi
echo "install-fabric-deps: ${missing[*]} missing: running apt-get update and apt-get install"
export DEBIAN_FRONTEND=noninteractive
"${sudo_prefix[@]}" apt-get update -q
"${sudo_prefix[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
