#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine, starts PostgreSQL
# and fetches Apache Kafka and Debezium. Safe to run again: it installs only
# what is missing and fetches into .cache/ (git-ignored) only once.
#
#   - Debian: PostgreSQL, Prometheus (promtool), Alertmanager, Chromium, stress
#   - PostgreSQL's cluster: trust for 127.0.0.1 and ::1 (tests connect as
#     postgres@127.0.0.1:5432 and make their own databases), started, waited for
#   - Maven Central: Apache Kafka (broker, tools, Connect) into .cache/kafka-*,
#     Debezium's PostgreSQL connector into .cache/debezium-*, the outbox
#     libraries that ship their DDL (libraries/) into .cache/libraries-*
#   - the Go module proxy: promtool 3.x, built into .cache/bin/promtool (the
#     rule tests run it beside Debian's 2.x promtool)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v stress >/dev/null 2>&1 || need+=(stress)
[ -x /usr/bin/pg_ctlcluster ] && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql postgresql-contrib)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/deps.sh: missing ${need[*]}; run as root or install them: apt-get install -y --no-install-recommends ${need[*]}" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# PostgreSQL: the tests use DATABASE_URL, else postgres@127.0.0.1:5432 with
# trust for loopback in the test cluster's pg_hba.conf.
if [ -z "${DATABASE_URL:-}" ]; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$ver" ]; then
    ver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    pg_createcluster "$ver" main >/dev/null
  fi
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  if ! grep -q '^# outbox_exporter tests' "$hba"; then
    # Loopback trust first, so it wins over the packaged scram lines.
    { echo '# outbox_exporter tests: trust loopback'
      echo 'host all all 127.0.0.1/32 trust'
      echo 'host all all ::1/128 trust'
      echo 'host replication all 127.0.0.1/32 trust'
      cat "$hba"; } >"$hba.new" && mv "$hba.new" "$hba"
    chown postgres:postgres "$hba"
    if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
      pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
    fi
  fi
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  fi
  ok=
  for _ in $(seq 1 60); do
    if pg_isready -q -h 127.0.0.1 -p 5432 && psql -qAt -h 127.0.0.1 -U postgres -c 'select 1' >/dev/null 2>&1; then ok=1; break; fi
    sleep 1
  done
  [ -n "$ok" ] || { echo "scripts/deps.sh: PostgreSQL $ver did not accept postgres@127.0.0.1:5432 within 60 s" >&2; exit 1; }
fi

# Apache Kafka and Debezium from Maven Central, once. Versions are pinned in
# the poms; the folder names carry them so a bump fetches anew.
fetch() { # pom, folder
  local pom=$1 dir=$2
  [ -f "$dir/.complete" ] && return 0
  echo "deps: fetching $(basename "$(dirname "$pom")") into $dir"
  rm -rf "$dir"
  local log
  log=$(mktemp)
  mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DoutputDirectory="$PWD/$dir/libs" >"$log" 2>&1 \
    || { cat "$log" >&2; rm -f "$log"; echo "scripts/deps.sh: maven could not fetch $pom" >&2; exit 1; }
  rm -f "$log"
  touch "$dir/.complete"
}
kafka_version=$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' scripts/kafka/pom.xml)
debezium_version=$(sed -n 's|.*<debezium.version>\(.*\)</debezium.version>.*|\1|p' scripts/debezium/pom.xml)
fetch scripts/kafka/pom.xml ".cache/kafka-$kafka_version"
fetch scripts/debezium/pom.xml ".cache/debezium-$debezium_version"
libraries_version=$(sed -n 's|.*<libraries.version>\(.*\)</libraries.version>.*|\1|p' scripts/libraries/pom.xml)
fetch scripts/libraries/pom.xml ".cache/libraries-$libraries_version"

go mod download

# promtool 3.x, built from its source on the Go module proxy (no binary
# download), once per version: 3.x reads ranges and instant selectors
# left-open, so rules and their tests must hold on both. The stamp file
# names the version built.
promtool3=v0.316.0
if [ ! -x .cache/bin/promtool ] || [ ! -f ".cache/bin/.promtool-$promtool3" ]; then
  echo "deps: building promtool $promtool3 (Prometheus 3.x) into .cache/bin"
  mkdir -p .cache/bin
  GOBIN="$PWD/.cache/bin" go install "github.com/prometheus/prometheus/cmd/promtool@$promtool3"
  rm -f .cache/bin/.promtool-*
  touch ".cache/bin/.promtool-$promtool3"
fi
