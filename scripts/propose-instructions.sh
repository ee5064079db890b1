#!/usr/bin/env bash
# Instructions the leader executes per proposal (`Replica::propose`, inclusive), counted by
# callgrind over `mu bench replication --protocol mu --payload 64`: a measure of the replica's
# own CPU work on a proposal's path that, unlike its latency, does not move with the machine's
# load, so two builds compare on a 2-vCPU machine. Fewer instructions is not always less time
# (the entry checksum in four lanes runs more instructions in less time), so read it beside a
# latency measured with a core per thread.
#
# The benchmark first goes once round the log (65,536 slots at 64 B), where the slot after the
# last one written is still empty; a leader running for long finds the entry of the lap before
# there instead. So the script runs the benchmark twice, with 10,000 and 20,000 timed proposals
# after the same warm-up, and divides the difference: the cost of a proposal in the later laps.
#
# Under callgrind a proposal takes about 100 µs, so the leader is idle long enough between
# proposals to publish its FUO to both followers each time (`FUO_PUBLISH_AFTER_NS`), which a
# leader proposing back to back does not: that adds two posts to every proposal here. Compare
# counts of two builds, not absolute figures.
#
# Usage: scripts/propose-instructions.sh [path to the mu binary] (default: target/release/mu)
set -euo pipefail
mu=${1:-target/release/mu}
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
[ -x "$mu" ] || { echo "no mu binary at $mu (cargo build --release -p mu-cli)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for samples in 10000 20000; do
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$samples" \
        --toggle-collect='mu_replica::replica::Replica::propose' \
        "$mu" bench replication --protocol mu --payload 64 --samples "$samples" \
        --read-period-us 100000 >"$out/bench.$samples" 2>"$out/valgrind.$samples" \
        || { cat "$out/valgrind.$samples" >&2; exit 1; }
done
python3 - "$out/cg.10000" "$out/cg.20000" <<'PY'
import re, sys

def count(path):
    """(instructions collected, calls of Replica::propose) in one callgrind output file."""
    total, calls, names, callee = 0, 0, {}, None
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("summary:") or line.startswith("totals:"):
            total = int(line.split()[1])
        m = re.match(r"^(c?)fn=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3):
                names[m.group(2)] = m.group(3)
            if m.group(1):
                callee = names.get(m.group(2), "")
            continue
        if line.startswith("calls=") and callee == "mu_replica::replica::Replica::propose":
            calls += int(line.split("=")[1].split()[0])
            callee = None
    return total, calls

(t1, c1), (t2, c2) = count(sys.argv[1]), count(sys.argv[2])
if c1 == 0 or c2 == 0:
    sys.exit("no call of mu_replica::replica::Replica::propose was recorded: was it inlined "
             "into its caller, or renamed?")
if c2 <= c1:
    sys.exit(f"the longer run recorded no more proposals ({c1}, {c2})")
print(f"{(t2 - t1) / (c2 - c1):.0f} instructions per proposal after the first lap of the log "
      f"({c2 - c1} proposals; {t1 / c1:.0f} per proposal over the whole shorter run)")
PY
