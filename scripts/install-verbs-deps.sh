#!/usr/bin/env bash
# Installs what building mu-fabric-verbs with `--features verbs` needs: cmake and libclang (for
# bindgen in rdma-mummy-sys). Idempotent: installs only what is missing, and says what it does.
# libibverbs itself is loaded at run time; without it (or without an RDMA device) the backend
# reports "no RDMA device found". Debian/Ubuntu (apt-get) only.
set -euo pipefail

missing=()
if command -v cmake >/dev/null 2>&1; then
    echo "install-verbs-deps: cmake present ($(command -v cmake))"
else
    missing+=(cmake)
fi
# bindgen loads libclang.so at build time; the runtime package alone has only versioned names.
if ls /usr/lib/llvm-*/lib/libclang.so /usr/lib/x86_64-linux-gnu/libclang.so /usr/lib/aarch64-linux-gnu/libclang.so \
    >/dev/null 2>&1 || dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q "install ok installed"; then
    echo "install-verbs-deps: libclang present"
else
    missing+=(libclang-dev)
fi

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-verbs-deps: nothing to install"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-verbs-deps: missing ${missing[*]} and no apt-get here; install them by hand" >&2
    exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi
echo "install-verbs-deps: apt-get install -y ${missing[*]}"
"${sudo[@]}" apt-get install -y "${missing[@]}" || {
    echo "install-verbs-deps: install failed; refreshing the package lists and retrying"
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y "${missing[@]}"
}
echo "install-verbs-deps: done"
