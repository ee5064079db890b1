#!/usr/bin/env bash
# Packs what a lent 16-vCPU machine needs to measure the latency targets, and the script it
# runs there, into .devbin/ (ignored by git):
#   .devbin/mu         the release binary, debug info stripped
#   .devbin/lib/       the shared libraries it loads that a bare Debian machine may lack
#                      (libfabric and what it pulls in; not libc, libm, libgcc_s)
#   .devbin/run.sh     the measurements, in the order of their value, each one's JSON and log
#                      written under $OUT (or .devbin/out when OUT is unset)
#
# The machine is lent for minutes, not hours, so run.sh does only what a 2-vCPU machine
# cannot: the seven targets at once (`mu bench targets`, about 2 minutes there), kill-mode
# failovers of both engines with dedicated threads (the 50 µs target, with the set-up phases and
# aborts in the JSON, and each new leader's busy polls in kill/*-polls.csv), and replication at 64 bytes with and without pinned threads, alternated.
# It prints a one-line summary of each as it goes, so that a run cut short still says something.
#
# Usage: bash scripts/device-pack.sh [--no-build]; then run `bash .devbin/run.sh` on the lent
# machine from the repository root (it needs only .devbin/).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--no-build" ]; then
    cargo build --release -p mu-cli
fi
rm -rf .devbin
mkdir -p .devbin/lib
strip --strip-debug -o .devbin/mu target/release/mu
# Every library the binary loads but the C runtime's own.
ldd target/release/mu | awk '$3 ~ /^\// { print $3 }' | while read -r lib; do
    case "$(basename "$lib")" in
        libc.so.*|libm.so.*|libgcc_s.so.*|ld-linux*) ;;
        *) cp -L "$lib" .devbin/lib/ ;;
    esac
done
commit=$(git rev-parse --short HEAD)
cat > .devbin/run.sh <<EOF
#!/usr/bin/env bash
# Made by scripts/device-pack.sh at commit $commit.
set -uo pipefail
here=\$(cd "\$(dirname "\$0")" && pwd)
out=\${OUT:-\$here/out}
mkdir -p "\$out"
export LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
mu="\$here/mu"
{ nproc; lscpu; uname -a; } > "\$out/machine.txt" 2>&1
echo "commit $commit, \$(nproc) CPUs"
step() { # name, then the command; JSON on stdout to \$out/name.json, stderr to \$out/name.log
    local name=\$1; shift
    local t0=\$(date +%s)
    "\$@" > "\$out/\$name.json" 2> "\$out/\$name.log"
    local rc=\$?
    echo "\$name: exit \$rc in \$((\$(date +%s) - t0)) s"
    python3 - "\$out/\$name.json" <<'PY' || true
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"  (no JSON: {e})")
def walk(o, path=""):
    if isinstance(o, dict):
        for k, v in o.items():
            if k in ("samples", "rows", "timeline"):
                continue
            walk(v, f"{path}.{k}" if path else k)
    elif isinstance(o, list):
        for i, v in enumerate(o):
            # A run of several engines: name each by its protocol where it has one.
            name = v.get("protocol", i) if isinstance(v, dict) else i
            walk(v, f"{path}[{name}]")
    elif isinstance(o, (int, float, str, bool)) and any(
            w in path for w in ("p50", "verdict", "ratio", "met", "setup_aborts", "ended_by")):
        print(f"  {path} = {o}")
walk(d)
PY
}
step targets "\$mu" bench targets --json --out "\$out/targets"
step kill "\$mu" bench failover --mode kill --protocol mu,velos --threads dedicated --count 100 --json --out "\$out/kill"
for round in 1 2; do
    step "repl-shared-\$round" "\$mu" bench replication --protocol mu --payload 64 --json
    step "repl-pinned-\$round" "\$mu" bench replication --protocol mu --payload 64 --pin --json
done
EOF
chmod +x .devbin/run.sh
du -sh .devbin
echo "packed: .devbin/ (carry it, then run: bash .devbin/run.sh)"
