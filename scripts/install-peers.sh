#!/usr/bin/env bash
# Installs the peer systems that `mu bench peers` and the mu-peers tests measure against:
# Redis (Debian package redis-server), Memcached and its client tools (Debian packages memcached
# and libmemcached-tools, for the replicated Memcached's tests), etcd (Debian package etcd-server) and, for Aeron Cluster, a
# Java development kit and Maven (Debian packages default-jdk-headless and maven), then builds
# the Aeron Cluster members and client (scripts/build-aeron-peer.sh, which fetches Aeron from
# Maven Central the first time). Idempotent: it installs nothing when the binaries are present,
# and the build does nothing when its jar is up to date. The benchmark starts its own server
# processes on loopback with private directories, so the packages' own services, if the package
# manager started any, are neither needed nor used; they are stopped here so that they hold no
# ports.
set -euo pipefail

redis_binary=/usr/bin/redis-server
etcd_binary=/usr/bin/etcd
memcached_binary=/usr/bin/memcached

missing=()
[ -x "$redis_binary" ] || missing+=(redis-server)
[ -x "$etcd_binary" ] || missing+=(etcd-server)
[ -x "$memcached_binary" ] || missing+=(memcached)
# Debian's libmemcached-tools names its tools memc* (memccapable, memcslap).
command -v memccapable >/dev/null 2>&1 || missing+=(libmemcached-tools)
{ command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; } ||
  missing+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-peers: redis-server, memcached, etcd, Java and Maven already installed, nothing to install"
else
  sudo_prefix=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo_prefix=(sudo)
    else
      echo "install-peers: not root and no sudo: install ${missing[*]} by hand" >&2
      exit 1
    fi
  fi
  echo "install-peers: missing ${missing[*]}: running apt-get update and apt-get install"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_prefix[@]}" apt-get update -q
  "${sudo_prefix[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  # On a machine with an init system the packages start their own services (on the default
  # ports, as users redis and etcd). The benchmark starts its own servers on other ports and does
  # not use them: stop them so that they cost nothing while measuring.
  if pgrep -u redis -x redis-server >/dev/null 2>&1 || pgrep -u etcd -x etcd >/dev/null 2>&1 ||
    pgrep -u memcache -x memcached >/dev/null 2>&1; then
    if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
      "${sudo_prefix[@]}" systemctl disable --now redis-server etcd memcached >/dev/null 2>&1 || true
    elif command -v service >/dev/null 2>&1; then
      "${sudo_prefix[@]}" service redis-server stop >/dev/null 2>&1 || true
      "${sudo_prefix[@]}" service etcd stop >/dev/null 2>&1 || true
      "${sudo_prefix[@]}" service memcached stop >/dev/null 2>&1 || true
    fi
    echo "install-peers: stopped the packages' own redis-server, etcd and memcached services"
  fi
  echo "install-peers: installed ${missing[*]}"
fi

for binary in "$redis_binary" "$etcd_binary" "$memcached_binary"; do
  if [ ! -x "$binary" ]; then
    echo "install-peers: $binary is still missing after install" >&2
    exit 1
  fi
done
echo "install-peers: $("$redis_binary" --version)"
echo "install-peers: $("$etcd_binary" --version | head -n 1)"
echo "install-peers: $("$memcached_binary" --version)"

# Aeron 1.44 needs Java 17 or later (the members and client are compiled for 17).
java_release=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
if [ "${java_release%%.*}" -lt 17 ] 2>/dev/null; then
  echo "install-peers: java is version $java_release; Aeron Cluster's peer needs 17 or later" >&2
  exit 1
fi
echo "install-peers: Java $java_release, $(mvn -v 2>/dev/null | head -n 1 | sed 's/\x1b\[[0-9;]*m//g')"
bash "$(dirname "$0")/build-aeron-peer.sh"
