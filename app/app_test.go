package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

const reloadConfig = `
databases:
  main:
    dsn: DSN
outboxes:
  messages:
    database: main
    table: public.outbox
    id: id
    created_at: created_at
    status: status
    pending: [PENDING]
    published: [PUBLISHED]
    published_at: published_at
    deadline: DEADLINE
kafka:
  main:
    brokers: [127.0.0.1:1]
    deadline: KDEADLINE
audit:
  messages:
    kafka: main
    topics: [messages]
    event_id: key
reconcile:
  idx:
    schedule: "@every 1h"
    authority: {database: main, table: messages, key: id, version: version, created_at: created_at}
    target: {database: main, table: search_index, key: id, version: version}
`

func parseReload(t *testing.T, dsn, deadline, kdeadline string) *config.Config {
	t.Helper()
	y := strings.NewReplacer("DSN", dsn, "KDEADLINE", kdeadline, "DEADLINE", deadline).Replace(reloadConfig)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func published(t *testing.T, a *App) (float64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ok bool
	v := -1.0
	for _, m := range a.Exporter.Collect(ctx) {
		switch {
		case testutil.IsMetric(m, "outbox_published_events_total"):
			v = testutil.MetricValue(t, m)
		case testutil.IsMetric(m, "outbox_exporter_collector_success") && testutil.LabelOf(t, m, "collector") == "outbox":
			ok = testutil.MetricValue(t, m) == 1
		}
	}
	return v, ok
}

// reloadSchema is the outbox, authority and target of the reload tests.
const reloadSchema = `CREATE TABLE outbox (id bigint PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),
	  status text NOT NULL DEFAULT 'PENDING', published_at timestamptz);
	  CREATE TABLE messages (id bigint, version int, created_at timestamptz);
	  CREATE TABLE search_index (id bigint, version int);
	  `

// TestReloadKeepsUnchangedParts: a reload with an unchanged config keeps
// every part, so the published counter counts the row published around
// the reload, and closing the old App leaves the kept pool, client,
// auditor and scheduler working; a changed outbox (or cluster) starts
// fresh.
func TestReloadKeepsUnchangedParts(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, reloadSchema+`INSERT INTO outbox (id) VALUES (1), (2)`)
	ctx := context.Background()
	logger := testutil.Quiet()
	a1, err := Build(ctx, parseReload(t, db.URL, "1m", "10m"), logger)
	if err != nil {
		t.Fatal(err)
	}
	a1.Start(ctx)
	if v, ok := published(t, a1); v != 0 || !ok {
		t.Fatalf("first scrape: published %v, success %v", v, ok)
	}
	// Published between the last scrape of the old App and the first of
	// the new one: a reload must not lose it.
	db.Exec(t, `UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE id = 1`)
	a2, err := Rebuild(ctx, parseReload(t, db.URL, "1m", "10m"), logger, a1)
	if err != nil {
		t.Fatal(err)
	}
	a2.Start(ctx)
	a1.Close()
	defer func() { a2.Close() }()
	if a2.Pools["main"] != a1.Pools["main"] || a2.kafka["main"] != a1.kafka["main"] ||
		a2.Audits["messages"] != a1.Audits["messages"] || a2.Reconcile != a1.Reconcile {
		t.Fatalf("unchanged parts were rebuilt: pool %v, kafka %v, audit %v, reconcile %v",
			a2.Pools["main"] == a1.Pools["main"], a2.kafka["main"] == a1.kafka["main"],
			a2.Audits["messages"] == a1.Audits["messages"], a2.Reconcile == a1.Reconcile)
	}
	if v, ok := published(t, a2); v != 1 || !ok {
		t.Fatalf("after an unchanged reload: published %v (want 1: the counter and its watermark are kept), success %v", v, ok)
	}

	// A changed outbox and cluster start fresh; the database, the audit's
	// dependencies unchanged apart from the outbox, are handled alike.
	a3, err := Rebuild(ctx, parseReload(t, db.URL, "2m", "5m"), logger, a2)
	if err != nil {
		t.Fatal(err)
	}
	a3.Start(ctx)
	a2.Close()
	a2 = a3
	if a3.Pools["main"] != a1.Pools["main"] {
		t.Error("the unchanged database's pool was rebuilt")
	}
	if a3.kafka["main"] == a1.kafka["main"] || a3.Audits["messages"] == a1.Audits["messages"] {
		t.Error("a changed cluster or outbox kept the old client or auditor")
	}
	if a3.Reconcile != a1.Reconcile {
		t.Error("the unchanged reconcile jobs were rebuilt")
	}
	if v, ok := published(t, a3); v != 0 || !ok {
		t.Fatalf("after a changed reload: published %v (want 0: a changed outbox starts fresh), success %v", v, ok)
	}
	db.Exec(t, `UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE id = 2`)
	if v, _ := published(t, a3); v != 1 {
		t.Fatalf("the fresh counter counts the next publish: %v", v)
	}
}

// TestRebuildFailureLeavesPrevious: a reload that fails (a bad
// reconcile plan) leaves the running App whole.
func TestRebuildFailureLeavesPrevious(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (id bigint PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),
	  status text NOT NULL DEFAULT 'PENDING', published_at timestamptz)`)
	ctx := context.Background()
	a1, err := Build(ctx, parseReload(t, db.URL, "1m", "10m"), testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	bad := parseReload(t, db.URL, "1m", "10m")
	bad.Reconcile["idx"].Schedule = "not a schedule"
	if _, err := Rebuild(ctx, bad, testutil.Quiet(), a1); err == nil {
		t.Fatal("a bad schedule was accepted")
	}
	if _, ok := published(t, a1); !ok {
		t.Fatal("the running App stopped working after a failed reload")
	}
}

// TestReloadKeepsUnchangedReconcileJobs: a reload that changes one
// reconcile job keeps the other's last result and its series, and the
// changed job starts afresh, in the same scheduler.
func TestReloadKeepsUnchangedReconcileJobs(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, reloadSchema+`INSERT INTO messages VALUES (1, 1, now() - interval '1 hour')`)
	ctx := context.Background()
	logger := testutil.Quiet()
	withJob := func(schedule string) *config.Config {
		cfg := parseReload(t, db.URL, "1m", "10m")
		j := *cfg.Reconcile["idx"]
		j.Schedule = schedule
		cfg.Reconcile["other"] = &j
		return cfg
	}
	a1, err := Build(ctx, withJob("@every 2h"), logger)
	if err != nil {
		t.Fatal(err)
	}
	a1.Start(ctx)
	for _, j := range []string{"idx", "other"} {
		if _, err := a1.Reconcile.Run(ctx, j, true); err != nil {
			t.Fatalf("run %s: %v", j, err)
		}
	}
	lastIdx, lastOther := a1.Reconcile.Last("idx"), a1.Reconcile.Last("other")
	a2, err := Rebuild(ctx, withJob("@every 3h"), logger, a1)
	if err != nil {
		t.Fatal(err)
	}
	a2.Start(ctx)
	a1.Close()
	defer a2.Close()
	if a2.Reconcile != a1.Reconcile {
		t.Fatal("the scheduler was replaced")
	}
	if a2.Reconcile.Last("idx") != lastIdx {
		t.Error("the unchanged job lost its last result")
	}
	if l := a2.Reconcile.Last("other"); l != nil || lastOther == nil {
		t.Errorf("the changed job kept its last result %+v", l)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	success := map[string]float64{}
	for _, m := range a2.Exporter.Collect(cctx) {
		if testutil.IsMetric(m, "outbox_reconcile_last_success_timestamp_seconds") {
			success[testutil.LabelOf(t, m, "reconcile")] = testutil.MetricValue(t, m)
		}
	}
	if want := float64(lastIdx.Finished.UnixNano()) / 1e9; success["idx"] != want {
		t.Errorf("idx's last success after the reload: %v, want %v (kept)", success["idx"], want)
	}
	if _, ok := success["other"]; ok {
		t.Error("the changed job still shows the old job's last success")
	}
	// The scheduler still works after the old App closed.
	if _, err := a2.Reconcile.Run(ctx, "other", true); err != nil {
		t.Errorf("run of the changed job after the reload: %v", err)
	}
}
