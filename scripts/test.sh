#!/usr/bin/env bash
# Runs every gate: formatting, lints, the linearizability checker's own tests, all tests
# (conformance suite on shm and sim, the guard model, unit tests, simulator scenarios), sweeps of
# 200 simulator seeds on Mu and on Velos and of 100 more with membership changes on each, the
# TLA+ models, a smoke run of the fabric benchmark, of the simulated-RDMA figures and
# of the whole benchmark suite (mu bench all --quick), and the main job (mu demo, on Mu and on
# Velos). Works on a fresh machine: it installs what it needs (Go, Java for TLC and for the Aeron
# Cluster peer, Maven, Redis, Memcached with its client tools, and etcd) and says what it does.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> [%4d s] %s\n' "$SECONDS" "$*"; }

step "toolchain"
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install Rust (https://rustup.rs) and run again" >&2
  exit 1
fi
cargo --version
rustup component add rustfmt clippy >/dev/null 2>&1 || true

step "peer systems for the comparison benchmark and its tests (Redis, Memcached and libmemcached-tools, etcd, Java and Maven: Debian packages; the Aeron Cluster peer: built with Maven)"
bash scripts/install-peers.sh

step "fabric libraries for the libfabric backend (Debian libfabric-dev)"
bash scripts/install-fabric-deps.sh

step "format"
cargo fmt --all -- --check

step "lints"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "a build without mu-cli's default features (ofi: libfabric; bench: the benchmarks): it builds without warnings, and refuses an ofi cluster clearly"
cargo clippy -p mu-cli --no-default-features --quiet -- -D warnings
cargo test -q -p mu-daemon --lib ofi_feature

step "RDMA verbs backend: build with --features verbs (cmake, libclang), lints, conformance (skips only without a device)"
bash scripts/install-verbs-deps.sh
cargo clippy -p mu-fabric-verbs --all-targets --features verbs --quiet -- -D warnings
cargo test -p mu-fabric-verbs --features verbs

step "linearizability checker (Go, porcupine): vet, tests, build target/lincheck/lincheck"
scripts/lincheck.sh

step "tests (the replicated Redis and Memcached tests, redis_shm and memcached_shm, among them)"
cargo test --workspace

# A sweep of `mu sim` seeds with histories checked by lincheck; fails on any failed seed.
sim_sweep() {
  local protocol=$1 faults=$2 seeds=$3 first=$4
  local out
  out=$(./target/release/mu sim --seeds "$seeds" --first-seed "$first" --protocol "$protocol" \
    --faults "$faults" --lincheck target/lincheck/lincheck --json)
  echo "$out"
  python3 - "$out" "$protocol" "$faults" "$seeds" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
protocol, faults, seeds = sys.argv[2], sys.argv[3], int(sys.argv[4])
assert d["protocol"] == protocol and d["seeds"] == seeds and d["faults"] == faults, d
assert d["linearizability_checked"] is True, d
assert d["failures"] == [], d["failures"]
assert d["acked"] > 0 and d["ops_answered"] > 0 and d["leader_changes"] > 0, d
if "membership" in faults:
    assert d["membership_changes"] > 0, d
print("%s sim (%s): %d seeds, %.1f seeds/s, %d membership changes, no failure"
      % (protocol, faults, seeds, d["seeds_per_second"], d["membership_changes"]))
PY
}

cargo build --release --quiet --bin mu
step "the embedding example: three replicas of a counter in one process (crates/replica/examples/embed.rs)"
cargo run --release --quiet -p mu-replica --example embed
step "simulator sweep: mu sim --seeds 200 (every fault on, 3 and 5 replicas, histories checked by lincheck)"
sim_sweep mu all 200 0
step "simulator sweep: mu sim --seeds 200 --protocol velos (every fault, restarts included, 3 and 5 replicas, lincheck)"
sim_sweep velos all 200 0
step "simulator sweep: mu sim --seeds 100 --faults all,membership, on Mu and on Velos (replicas added and removed, lincheck)"
sim_sweep mu all,membership 100 0
sim_sweep velos all,membership 100 0
step "simulator sweep: mu sim --protocol ukharon --seeds 200 (coordinators, members and caches; crashes, restarts, pauses, delays, partitions, clock drift, lease requests; one active view at a time, agreement, ids, convergence) and a broken lease engine it must catch"
out=$(./target/release/mu sim --protocol ukharon --seeds 200 --json)
python3 - "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["protocol"] == "ukharon" and d["seeds"] == 200 and d["failed"] == [], d
assert d["views"] > 1000 and d["faults_injected"] > 1000 and d["slack_ns_min"] > 0, d
print("ukharon sim: 200 seeds, %d views, %d faults, smallest slack %d ns, no failure"
      % (d["views"], d["faults_injected"], d["slack_ns_min"]))
PY
if ./target/release/mu sim --protocol ukharon --seeds 20 --mutation timestamp-after-reads >/dev/null 2>&1; then
  echo "the ukharon simulator missed a lease engine that takes its timestamp after the reads" >&2
  exit 1
fi
step "simulator sweep: mu sim --protocol ukharon --scenario drift-edge --seeds 50 (clocks at the drift bound, slow members that learn views late, views changed at random moments) and the lease engine without its drift margin it must catch"
out=$(./target/release/mu sim --protocol ukharon --scenario drift-edge --seeds 50 --json)
python3 - "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["scenario"] == "drift-edge" and d["seeds"] == 50 and d["failed"] == [], d
assert d["views"] > 1000 and 0 < d["slack_ns_min"] < 5000, d
print("ukharon drift edge: 50 seeds, %d views, smallest slack %d ns, no failure"
      % (d["views"], d["slack_ns_min"]))
PY
if ./target/release/mu sim --protocol ukharon --scenario drift-edge --seeds 3 --mutation no-drift-margin >/dev/null 2>&1; then
  echo "the ukharon simulator missed a lease engine without its drift margin" >&2
  exit 1
fi

step "simulator sweep: mu sim --protocol ukharon-kv --seeds 200 (uKharon-KV under every uKharon fault, clock drift included, the primary crashed, stopped, and crashed with the leading coordinator; stale answers, lincheck, lost writes, digests) and broken engines it must catch"
out=$(./target/release/mu sim --protocol ukharon-kv --seeds 200 --lincheck target/lincheck/lincheck --json)
python3 - "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["protocol"] == "ukharon-kv" and d["seeds"] == 200 and d["failed"] == [], d
assert d["linearizability_checked"] is True, d
assert d["ops_returned"] > 100000 and d["failovers"] > 200 and d["faults_injected"] > 1000, d
# The known gap (docs/protocols/ukharon-kv.md): faults, and the removals they cause, take every
# member that held the state (4 of these 200 seeds when measured).
lost = d["state_lost_seeds"]
assert len(lost) <= 10, lost
print("ukharon-kv sim: 200 seeds, %d operations answered, %d failovers, %d faults, no failure; "
      "%d lost the state" % (d["ops_returned"], d["failovers"], d["faults_injected"], len(lost)))
PY
for mutation in answer-before-complete answer-without-active get-from-speculative-state serve-before-scan; do
  if ./target/release/mu sim --protocol ukharon-kv --seeds 20 --mutation "$mutation" \
      --lincheck target/lincheck/lincheck >/dev/null 2>&1; then
    echo "the ukharon-kv simulator missed the broken engine $mutation" >&2
    exit 1
  fi
done

for protocol in mu velos; do
step "simulator sweep: mu sim --protocol $protocol --reads lease --seeds 200 (replicas appointed by uKharon's views, reads answered locally under two checks, reads stalled between them, every uKharon fault on whole member processes; stale answers, agreement, lincheck, lost writes, digests) and a local read without its second check it must catch"
# 200 seeds: about a minute per protocol on two cores.
out=$(./target/release/mu sim --protocol "$protocol" --reads lease --seeds 200 \
  --lincheck target/lincheck/lincheck --json)
python3 - "$out" "$protocol" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["protocol"] == sys.argv[2] and d["reads"] == "lease" and d["seeds"] == 200, d
assert d["failed"] == [] and d["linearizability_checked"] is True, d
assert d["local_answers"] > 50000 and d["stalls"] > 1000 and d["failovers"] > 1000, d
# A known liveness gap (docs/protocols/lease-reads.md, "Simulator"): none seen in 400 seeds.
aside = d["stands_aside_seeds"]
assert len(aside) <= 2, aside
print("%s --reads lease sim: 200 seeds, %d answers (%d local reads, %d stalled between their "
      "checks), %d failovers, no failure; %d stopped at an appointed replica standing aside"
      % (sys.argv[2], d["answers"], d["local_answers"], d["stalls"], d["failovers"], len(aside)))
PY
if ./target/release/mu sim --protocol "$protocol" --reads lease --seeds 4 \
    --mutation lease-read-without-second-check --no-lincheck >/dev/null 2>&1; then
  echo "the $protocol --reads lease simulator missed a local read without its second check" >&2
  exit 1
fi
done

step "TLA+ models of Mu and of Velos's CAS slots (TLC: the models pass, the mutated models are caught; about 6 minutes)"
bash scripts/tlc.sh

step "benchmark smoke run: mu bench fabric (small sample count; nothing asserted about speed)"
out=$(./target/release/mu bench fabric --samples 20000 --perm-samples 2000 --json)
echo "$out"
python3 - "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
for key in ["write_rtt_ns", "read_rtt_ns", "cas_rtt_ns", "write2_rtt_ns", "bare_pingpong_ns"]:
    for q in ["p50", "p99", "p999"]:
        assert d[key][q] > 0, (key, q)
for key in ["perm_fast_ns", "perm_slow_ns"]:
    assert d[key]["p50"] > 0, key
print("bench fabric JSON has every figure")
PY

step "simulated RDMA smoke run: mu bench sim --quick --svg on every hardware profile (figures beside the papers', uKharon's Table 2 on its profile, a chart per figure set; nothing asserted about the ratios)"
rm -rf target/sim-rdma-smoke
for profile in mu-osdi2020 velos ukharon; do
  out=$(./target/release/mu bench sim --profile "$profile" --quick --json --svg target/sim-rdma-smoke)
  python3 - "$out" "$profile" <<'PY'
import json, math, sys
d = json.loads(sys.argv[1])
assert d["simulated"] is True and d["profile"] == sys.argv[2], d
assert d["figures"], "no figures"
for f in d["figures"]:
    for key in ["name", "unit", "paper", "simulated"]:
        assert key in f, (key, f)
    assert isinstance(f["name"], str) and isinstance(f["unit"], str), f
    assert f["paper"] > 0 and f["simulated"] > 0 and math.isfinite(f["simulated"]), f
if sys.argv[2] == "ukharon":
    table2 = [f for f in d["figures"] if f["name"].startswith("uKharon failover ")]
    assert len(table2) == 12, [f["name"] for f in table2]
print(sys.argv[2], ", ".join("%s %.3g/%.3g" % (f["name"], f["simulated"], f["paper"]) for f in d["figures"]))
PY
  for chart in replication failover; do
    grep -q "<svg" "target/sim-rdma-smoke/sim-$profile-$chart.svg"
  done
done

step "benchmark suite smoke run: mu bench all --quick (every figure produced; nothing asserted about speed)"
rm -rf target/bench-smoke
out=$(./target/release/mu bench all --quick --json --out target/bench-smoke)
echo "$out"
python3 - "$out" <<'PY'
import json, os, sys
d = json.loads(sys.argv[1])
for name in ["payload", "peers", "e2e", "failover-kill", "failover-pause", "throughput"]:
    for ext in ["csv", "svg"]:
        path = os.path.join("target/bench-smoke", name + "." + ext)
        assert os.path.getsize(path) > 0, path
    assert open(os.path.join("target/bench-smoke", name + ".svg")).read().rstrip().endswith("</svg>"), name
p = d["payload"]
# 8 sizes x (standalone, kv in both modes; Redis, Memcached in handover) + the order book's 2.
assert len(p["results"]) == 50 and p["fabric_write2_ns"]["p50"] > 0, p
assert {(r["app"], r["mode"]) for r in p["results"]} == {
    (a, m) for a in ["standalone", "kv"] for m in ["direct", "handover"]} | {
    ("orderbook", "direct"), ("redis", "handover"), ("memcached", "handover")}, p
assert all(r["entry_bytes"] > r["payload_bytes"] for r in p["results"]
           if r["app"] in ["redis", "memcached"]), p
for r in p["results"]:
    assert r["samples"] > 0 and all(r["latency_ns"][q] > 0 for q in ["p1", "p50", "p99"]), r
systems = [r["system"] for r in d["peers"]["results"]]
assert systems == ["mu", "redis-wait", "etcd", "openraft", "aeron-cluster"], systems
assert all(r["p50_us"] > 0 and r["p99_us"] >= r["p50_us"] for r in d["peers"]["results"])
e = d["e2e"]
builtin = [r for r in e["results"] if r["app"] in ["kv", "orderbook"]]
assert {(r["transport"], r["system"], r["op"]) for r in builtin} == {
    (t, s, o) for t in ["unix", "tcp", "fabric"] for s in ["transport", "unreplicated", "replicated"]
    for o in ["put", "get", "order"]} | {
    ("fabric", s, "order-pipelined") for s in ["transport", "unreplicated", "replicated"]}, e
assert all(r["app"] == ("kv" if r["op"] in ["put", "get"] else "orderbook") for r in builtin), e
# Redis and Memcached: the bare server, the bare server through a byte relay, a one-replica
# cluster's front, three replicas; the breakdown's ratios (no bound) beside the bounded ones.
apps = [r for r in e["results"] if r["app"] not in ["kv", "orderbook"]]
assert {(r["app"], r["transport"], r["system"], r["op"]) for r in apps} == {
    (a, "unix", s, o) for a in ["redis", "memcached"]
    for s in ["direct", "relayed", "front-unreplicated", "replicated"] for o in ["set", "get"]}, e
assert {r["name"] for r in e["ratios"]} == {
    f"{a}-{o}-{w}" for a in ["redis", "memcached"] for o in ["set", "get"]
    for w in ["relay-hop", "front-work", "front-cost", "replication-added"]}, e
assert all(r["ratio"] > 0 and (r["bound"] is None) == (r["met"] is None) for r in e["ratios"]), e
assert all(r["in_flight"] == (8 if r["op"] == "order-pipelined" else 1) and r["ops_per_s"] > 0
           for r in e["results"]), e
assert e["replication_p50_us"] > 0 and e["fabric_write_rtt_p50_us"] > 0, e
assert {t["name"] for t in e["targets"]} == {"fabric-path-vs-write", "replication-added", "unix-vs-fabric"} | {
    f"{a}-{o}-replication-added" for a in ["redis", "memcached"] for o in ["set", "get"]}, e
for mode in ["kill", "pause"]:
    f = d["failover-" + mode]
    assert f["failovers"] == 100 and f["mode"] == mode, f
    for key in ["total_us", "detect_us", "switch_us"]:
        assert f[key]["p50"] > 0, (mode, key)
t = d["throughput"]["results"]
assert {(r["outstanding"], r["batch"]) for r in t} == {
    (o, b) for o in [1, 2, 4, 8] for b in [1, 2, 4, 8, 16, 32, 64, 128]}, t
assert all(r["mops"] > 0 and r["p50_us"] > 0 for r in t)
print("mu bench all --quick: every benchmark's JSON, CSV and SVG in %.0f s" % d["seconds"])
PY

step "targets smoke run: mu bench targets --quick (every target gets a figure; nothing asserted about speed)"
rm -rf target/bench-targets
out=$(./target/release/mu bench targets --quick --json --out target/bench-targets)
echo "$out"
python3 - "$out" <<'PY'
import json, os, sys
d = json.loads(sys.argv[1])
t = d["targets"]
assert len(t) == 7, t
assert (d["note"] is not None) == (d["cpus_allowed"] < 12), d["note"]
for r in t:
    assert r["measured"] is not None and r["measured"] > 0 and r["met"] in (True, False), r
for name in ["replication", "failover-kill", "failover-pause", "fabric", "replication-ofi"]:
    assert os.path.getsize(os.path.join("target/bench-targets", name + ".json")) > 0, name
floor = d["kill_mode_floor"]
assert floor["crash_notice_p50_us"] > 0 and floor["mu_detect_p50_us"] > 0, floor
print("mu bench targets --quick: a figure and a verdict for each of the %d targets in %.0f s"
      % (len(t), d["seconds"]))
PY

for run in mu:log:kv:socket velos:log:kv:socket ukharon-kv:log:kv:socket mu:lease:kv:socket velos:lease:kv:socket mu:log:orderbook:socket velos:log:orderbook:socket mu:log:kv:fabric velos:log:orderbook:fabric; do
IFS=: read -r protocol reads app transport <<< "$run"
step "the main job: mu demo --protocol $protocol --reads $reads --app $app --transport $transport (three replica processes, leader killed; JSON checked; ukharon-kv and leased reads: three coordinators besides; the order book: every acknowledged order known afterwards; fabric: clients over request rings)"
out=$(./target/release/mu demo --seconds 1 --json --protocol "$protocol" --reads "$reads" --app "$app" --transport "$transport")
echo "$out"
python3 - "$out" "$protocol" "$reads" "$app" "$transport" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["protocol"] == sys.argv[2], d
assert d["reads"] == (sys.argv[3] if d["protocol"] != "ukharon-kv" else "primary"), d
assert d["app"] == sys.argv[4] and d["transport"] == sys.argv[5], d
assert d["operations"] > 0 and d["lost_writes"] == 0, d
if d["app"] == "orderbook":
    assert d["acknowledged_orders_checked"] > 0 and d["trades"] > 0, d
else:
    assert d["acknowledged_keys_checked"] == 4 * 16, d  # every key of 4 clients x 16 (the defaults)
assert len(d["digests"]) == 2 and d["digests"][0] == d["digests"][1], d
assert d["failover_us"] > 0, d
print("mu demo (%s, reads %s): %d operations, failover %.2f ms, no acknowledged write lost, digests equal"
      % (d["protocol"], d["reads"], d["operations"], d["failover_us"] / 1000))
PY
if ls /dev/shm 2>/dev/null | grep -q '^mu-bench-demo-'; then
  echo "mu demo left its run directory behind" >&2
  exit 1
fi
done

step "the membership demo: mu demo --protocol ukharon (coordinators and members as processes, a member killed; JSON checked)"
out=$(./target/release/mu demo --protocol ukharon --json)
echo "$out"
python3 - "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["killed"] not in d["view"]["members"] and d["view"]["epoch"] > d["old_epoch"], d
assert set(d["active_after_kill_ns"]) == {str(m) for m in d["view"]["members"]}, d
# Appendix B across processes: the old view is inactive everywhere before the new one is active.
assert d["old_inactive_before_new_active_ns"] >= 0, d
print("mu demo --protocol ukharon: view %d without member %d, active on every member %.2f ms after the kill"
      % (d["view"]["epoch"], d["killed"], d["took_ns"] / 1e6))
PY

step "all gates passed"
