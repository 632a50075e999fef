#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine and starts
# PostgreSQL if it is down. Safe to run again: it only installs what is
# missing.
set -euo pipefail

need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/deps.sh: missing ${need[*]}; run as root or install them: apt-get install -y --no-install-recommends ${need[*]}" >&2
    exit 1
  fi
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# PostgreSQL: the tests use DATABASE_URL, else 127.0.0.1:5432.
if [ -z "${DATABASE_URL:-}" ] && ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$ver" ]; then
    echo "scripts/deps.sh: no PostgreSQL cluster found under /etc/postgresql" >&2
    exit 1
  fi
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi

go mod download
