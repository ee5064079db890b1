#!/usr/bin/env bash
# Builds the Aeron Cluster peer of `mu bench peers` (crates/peers/aeron: an echo service, a
# launcher for one member, a client) into crates/peers/aeron/target/mu-peers-aeron.jar, with
# Aeron's jar from Maven Central in target/lib. Does nothing when the jar is newer than the pom
# and every source file. Maven keeps what it fetched in its local repository (~/.m2 unless
# MAVEN_OPTS or settings say otherwise), so builds after the first run offline.
set -euo pipefail
cd "$(dirname "$0")/../crates/peers/aeron"

jar=target/mu-peers-aeron.jar
if [ -f "$jar" ] && compgen -G 'target/lib/aeron-all-*.jar' >/dev/null &&
  [ -z "$(find pom.xml src -newer "$jar" -print -quit)" ]; then
  echo "build-aeron-peer: $jar is up to date"
  exit 0
fi

for tool in java javac mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "build-aeron-peer: $tool is missing: run scripts/install-peers.sh" >&2
    exit 1
  fi
done

echo "build-aeron-peer: building $jar"
if ! mvn -B -q -Dstyle.color=never -o clean package >/dev/null 2>&1; then
  # Offline failed: the first build on this machine, or a compile error, which the online build
  # then shows.
  mvn -B -q -Dstyle.color=never clean package
fi
if [ ! -f "$jar" ] || ! compgen -G 'target/lib/aeron-all-*.jar' >/dev/null; then
  echo "build-aeron-peer: the build did not produce $jar and Aeron's jar in target/lib" >&2
  exit 1
fi
echo "build-aeron-peer: built $jar with $(basename target/lib/aeron-all-*.jar)"
