#!/usr/bin/env bash
# The project's test command: installs what is missing, then vets and runs
# every test against the real PostgreSQL, kfake, promtool, Prometheus,
# Alertmanager and Chromium. Artifacts (screenshots) land in ./artifacts.
set -euo pipefail
cd "$(dirname "$0")"

bash scripts/deps.sh

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
mkdir -p artifacts
export OUTBOX_ARTIFACTS="$PWD/artifacts"
go test -count=1 -timeout 25m ./...
# The Helm chart, rendered with the Helm library and decoded strictly
# against the Kubernetes and Prometheus Operator types: a module of its
# own, so that Helm's dependencies stay out of the exporter's go.mod.
(cd deploy/helm/charttest && go vet ./... && go test -count=1 ./...)
# The concurrent parts again under the race detector.
go test -count=1 -race -timeout 15m ./collectors/... ./web/... ./reconcile/...
# A short fuzz run of the config loader.
go test -run '^$' -fuzz FuzzParse -fuzztime 20s ./internal/config/
