package settings

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// registered wraps a Collector as a prometheus.Collector.
type registered struct {
	ctx context.Context
	c   *Collector
}

func (r registered) Describe(ch chan<- *prometheus.Desc) { r.c.Describe(ch) }
func (r registered) Collect(ch chan<- prometheus.Metric) {
	if err := r.c.Update(r.ctx, ch); err != nil {
		panic(err)
	}
}

// TestSettingsFollowTheConfig: the objective of each outbox with a
// publish time (the default where none is written) and the interval of
// each reconcile job, by schedule kind.
func TestSettingsFollowTheConfig(t *testing.T) {
	const yml = `
databases:
  db: {dsn: "postgres://x@localhost/db"}
outboxes:
  ledger:
    database: db
    table: ledger_outbox
    id: id
    created_at: created_at
    published_at: sent_at
    deadline: 1m
    slo_objective: 0.95
  refunds:
    database: db
    table: refund_outbox
    id: id
    created_at: created_at
    published_at: sent_at
    deadline: 1m
  no_publish_time:
    database: db
    table: plain
    id: id
    created_at: created_at
    deadline: 1m
reconcile:
  hourly_check:
    schedule: "@every 90s"
    authority: {database: db, table: t, key: id, version: v, created_at: c}
    target: {database: db, table: u, key: id, version: v}
  weekly_check:
    schedule: "0 3 * * 1"
    authority: {database: db, table: t, key: id, version: v, created_at: c}
    target: {database: db, table: u, key: id, version: v}
`
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP outbox_reconcile_interval_seconds The longest time between two scheduled runs of a reconcile job, worked out from its schedule. The alerts expect a success at least this often.
# TYPE outbox_reconcile_interval_seconds gauge
outbox_reconcile_interval_seconds{reconcile="hourly_check"} 90
outbox_reconcile_interval_seconds{reconcile="weekly_check"} 604800
# HELP outbox_slo_objective The share of an outbox's events that should be published within their deadline (its slo_objective). Only for outboxes whose publish time is read (published_at).
# TYPE outbox_slo_objective gauge
outbox_slo_objective{outbox="ledger"} 0.95
outbox_slo_objective{outbox="refunds"} 0.999
`
	if err := testutil.CollectAndCompare(registered{t.Context(), New(cfg)}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
