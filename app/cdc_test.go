package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster/pgclustertest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// A cdc section gives one cdc collector per database, whatever the number
// of slots on it, so that they are read in one statement.
func TestBuildWiresCDCPerDatabase(t *testing.T) {
	const yml = `
databases:
  app: {dsn: "postgres://x@127.0.0.1:1/app"}
  billing: {dsn: "postgres://x@127.0.0.1:1/billing"}
cdc:
  orders: {database: app, slot: orders_slot, deadline: 1m}
  users: {database: app, slot: users_slot, deadline: 1m}
  invoices: {database: billing, slot: invoices_slot, deadline: 5m}
`
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var targets []string
	for _, c := range a.Exporter.Collectors() {
		if c.Name() == "cdc" {
			targets = append(targets, c.Target())
		}
	}
	if len(targets) != 2 || targets[0] != "app" || targets[1] != "billing" {
		t.Errorf("cdc collectors for %v, want one for app and one for billing", targets)
	}
}

// scraped is one scrape of an App: the value of each series, keyed by
// name and the labels asked for.
type scraped []prometheus.Metric

func scrapeApp(t *testing.T, a *App) scraped {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return a.Exporter.Collect(ctx)
}

// value is the series name whose labels include labels; ok false when
// there is none.
func (s scraped) value(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	for _, m := range s {
		if !testutil.IsMetric(m, name) {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && testutil.LabelOf(t, m, k) == v
		}
		if match {
			return testutil.MetricValue(t, m), true
		}
	}
	return 0, false
}

func (s scraped) success(t *testing.T, collector, target string) float64 {
	t.Helper()
	v, ok := s.value(t, "outbox_exporter_collector_success", map[string]string{"collector": collector, "target": target})
	if !ok {
		t.Fatalf("no collector_success for %s/%s", collector, target)
	}
	return v
}

// pending is the pending count of an outbox's kind, 0 when the series is
// absent (a label set never seen).
func (s scraped) pending(t *testing.T, outbox, kind string) float64 {
	v, _ := s.value(t, "outbox_events", map[string]string{"outbox": outbox, "state": "pending", "kind": kind})
	return v
}

// An outbox linked to a cdc entry counts as pending exactly the rows
// committed after the slot's confirmed time, per label set, through the
// App's wiring on a real slot that the test advances as a connector
// would; its oldest age pages against the outbox's deadline. An outbox
// whose slot cannot be read fails its collection instead of reading 0,
// from the first scrape on (the outbox waits for the slot's first
// collection, which runs in the same scrape).
func TestOutboxBehindSlotWired(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ba := startBehindApp(ctx, t)
	a, cfg := ba.a, ba.cfg
	ghost := func(s scraped) {
		t.Helper()
		if s.success(t, "outbox", "ghost") != 0 {
			t.Error("the outbox of a missing slot collected")
		}
		if _, ok := s.value(t, "outbox_events", map[string]string{"outbox": "ghost"}); ok {
			t.Error("the outbox of a missing slot sent outbox_events")
		}
	}
	s := scrapeApp(t, a)
	if s.success(t, "outbox", "orders") != 1 {
		t.Fatal("the first scrape failed the linked outbox: it did not wait for its slot's first collection")
	}
	ghost(s)

	// Three rows created two minutes before they commit, behind the slot.
	ba.exec(t, `INSERT INTO outbox (created_at, kind) SELECT clock_timestamp() - interval '2 minutes', 'a' FROM generate_series(1, 3)`)
	s = ba.spacedScrape(t)
	behind := s
	age, _ := s.value(t, "outbox_oldest_pending_age_seconds", map[string]string{"outbox": "orders", "kind": "a"})
	late, _ := s.value(t, "outbox_past_deadline_events", map[string]string{"outbox": "orders", "kind": "a"})
	if s.pending(t, "orders", "a") != 3 || age < 120 || late != 3 {
		t.Errorf("behind the slot: pending %v (want 3), oldest %v s (want >= 120, past the 60 s deadline), past deadline %v (want 3)",
			s.pending(t, "orders", "a"), age, late)
	}
	ghost(s)

	// The connector publishes them; two more rows come behind. The slot
	// is advanced a scrape before the new rows, so that its confirmed
	// time, exact to one collection, lies between the two transactions.
	ba.advance(t)
	ba.spacedScrape(t)
	ba.exec(t, `INSERT INTO outbox (kind) VALUES ('b'), ('b')`)
	s = ba.spacedScrape(t)
	if s.pending(t, "orders", "a") != 0 || s.pending(t, "orders", "b") != 2 {
		t.Errorf("after the advance: pending a %v (want 0: published), b %v (want 2)", s.pending(t, "orders", "a"), s.pending(t, "orders", "b"))
	}
	if late, _ := s.value(t, "outbox_past_deadline_events", map[string]string{"outbox": "orders", "kind": "b"}); late != 0 {
		t.Errorf("fresh rows past the deadline: %v", late)
	}
	// The stuck rows the page and /api/v1/stuck list are the same rows.
	stuck, err := a.Stuck(ctx, "orders", 10)
	if err != nil || len(stuck) != 2 || stuck[0].Labels["kind"] != "b" || stuck[1].Labels["kind"] != "b" {
		t.Errorf("stuck rows behind the slot: %+v, %v; want the two rows of b", stuck, err)
	}
	if _, err := a.Stuck(ctx, "ghost", 10); err == nil {
		t.Error("stuck rows of the outbox of a missing slot were listed")
	}

	// Caught up: the outbox reads the slot's state of this scrape or the
	// one before, so after two scrapes nothing is pending, though every
	// row is still kept in the table.
	ba.advance(t)
	ba.spacedScrape(t)
	s = ba.spacedScrape(t)
	if s.pending(t, "orders", "a") != 0 || s.pending(t, "orders", "b") != 0 {
		t.Errorf("caught up: pending a %v, b %v, want 0", s.pending(t, "orders", "a"), s.pending(t, "orders", "b"))
	}
	if age, ok := s.value(t, "outbox_oldest_pending_age_seconds", map[string]string{"outbox": "orders", "kind": "a"}); !ok || age != 0 {
		t.Errorf("caught up: oldest age of a %v (present %v), want 0", age, ok)
	}
	if stuck, err := a.Stuck(ctx, "orders", 10); err != nil || len(stuck) != 0 {
		t.Errorf("caught up: stuck rows %+v, %v; want none", stuck, err)
	}
	promtoolDeadline(t, cfg, "orders", "a", behind, s)
	ghost(s)
}

// behindApp is an App on a throwaway cluster (wal_level = logical,
// track_commit_timestamp = on) with the outbox table public.outbox,
// logical slot orders_slot, and two outboxes on the table: orders,
// published by the slot (labelled by kind), and ghost, linked to a slot
// that does not exist.
type behindApp struct {
	a     *App
	cfg   *config.Config
	admin *pgxpool.Pool
}

func startBehindApp(ctx context.Context, t *testing.T) *behindApp {
	t.Helper()
	c := pgclustertest.Start(t, "a wal_level=logical cluster with track_commit_timestamp = on", func(ctx context.Context) (*cdctest.Cluster, error) {
		return cdctest.Start(ctx, cdctest.Options{Settings: map[string]string{"track_commit_timestamp": "on"}})
	})
	admin := c.Admin
	ba := &behindApp{admin: admin}
	ba.exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp(), kind text NOT NULL);
		CREATE INDEX ON outbox (created_at); CREATE INDEX ON outbox (kind, created_at)`)
	ba.exec(t, `SELECT pg_create_logical_replication_slot('orders_slot', 'test_decoding')`)
	yml := fmt.Sprintf(`
databases:
  main: {dsn: %q}
outboxes:
  orders: {database: main, table: public.outbox, id: id, created_at: created_at, labels: {kind: kind}, deadline: 1m}
  ghost: {database: main, table: public.outbox, id: id, created_at: created_at, deadline: 1m}
cdc:
  orders: {database: main, slot: orders_slot, deadline: 5m, outbox: orders}
  ghost: {database: main, slot: no_such_slot, deadline: 5m, outbox: ghost}
`, c.URL("postgres"))
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(ctx, cfg, testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	ba.a, ba.cfg = a, cfg
	return ba
}

func (ba *behindApp) exec(t *testing.T, sql string) {
	t.Helper()
	if _, err := ba.admin.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// advance plays the connector: it confirms everything written so far.
func (ba *behindApp) advance(t *testing.T) {
	ba.exec(t, `SELECT pg_replication_slot_advance('orders_slot', pg_current_wal_lsn())`)
}

// spacedScrape scrapes once the server's clock is HistoryMinGap past the
// slot collector's newest sample. The slot's confirmed time is exact to
// the interval between two samples the collector keeps, and it keeps
// them HistoryMinGap apart (a closer one replaces the newest); so the
// samples then lie between the transactions and the advances, whatever
// the machine's speed.
func (ba *behindApp) spacedScrape(t *testing.T) scraped {
	t.Helper()
	samples := ba.a.cdc["main"].History().Samples()
	last := samples[len(samples)-1].At
	deadline := time.Now().Add(30 * time.Second)
	for {
		var now time.Time
		if err := ba.admin.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		if now.Sub(last) > cdc.HistoryMinGap {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's clock did not pass %v", last.Add(cdc.HistoryMinGap))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return scrapeApp(t, ba.a)
}

// A reload keeps an unchanged cdc collector, and with it the WAL history
// that makes its lag seconds exact; a changed entry starts its database's
// collector afresh and leaves the other database's alone.
func TestReloadKeepsCDCCollector(t *testing.T) {
	yml := func(deadline string) *config.Config {
		cfg, err := config.Parse([]byte(`
databases:
  app: {dsn: "postgres://x@127.0.0.1:1/app"}
  billing: {dsn: "postgres://x@127.0.0.1:1/billing"}
cdc:
  orders: {database: app, slot: orders_slot, deadline: 1m}
  invoices: {database: billing, slot: invoices_slot, deadline: `+deadline+`}
`), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	ctx := context.Background()
	a1, err := Build(ctx, yml("5m"), testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	a2, err := Rebuild(ctx, yml("5m"), testutil.Quiet(), a1)
	if err != nil {
		t.Fatal(err)
	}
	a1.Close()
	if a2.cdc["app"] != a1.cdc["app"] || a2.cdc["billing"] != a1.cdc["billing"] {
		t.Fatal("an unchanged reload rebuilt a cdc collector (and lost its WAL history)")
	}
	if !slices.Contains(a2.Exporter.Collectors(), collectors.Collector(a1.cdc["app"])) {
		t.Fatal("the kept cdc collector is not run")
	}
	a3, err := Rebuild(ctx, yml("10m"), testutil.Quiet(), a2)
	if err != nil {
		t.Fatal(err)
	}
	a2.Close()
	defer a3.Close()
	if a3.cdc["app"] != a1.cdc["app"] {
		t.Error("a change on billing rebuilt app's cdc collector")
	}
	if a3.cdc["billing"] == a1.cdc["billing"] {
		t.Error("a changed deadline kept billing's cdc collector")
	}
}

// promtoolDeadline evaluates the generated OutboxNotificationDeadlineMissed
// rule of outbox on its real series: the scrape behind the slot for the
// first five minutes, the caught-up scrape after. It fires for kind
// (with the rule's one minute of for) while behind, and not once caught
// up.
func promtoolDeadline(t *testing.T, cfg *config.Config, outbox, kind string, behind, caught scraped) {
	t.Helper()
	f, err := alerts.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var kept alerts.File
	for _, g := range f.Groups {
		var rs []alerts.Rule
		for _, r := range g.Rules {
			if r.Alert == "OutboxNotificationDeadlineMissed" && r.Labels["outbox"] == outbox {
				r.Annotations = nil
				rs = append(rs, r)
			}
		}
		if len(rs) > 0 {
			g.Rules = rs
			kept.Groups = append(kept.Groups, g)
		}
	}
	if len(kept.Groups) == 0 {
		t.Fatalf("no OutboxNotificationDeadlineMissed rule for outbox %s", outbox)
	}
	rules, err := alerts.Marshal(kept)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString("rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n")
	for _, name := range []string{"outbox_oldest_pending_age_seconds", "outbox_deadline_seconds"} {
		ls := map[string]string{"outbox": outbox, "kind": kind}
		b, ok1 := behind.value(t, name, ls)
		c, ok2 := caught.value(t, name, ls)
		if !ok1 || !ok2 {
			t.Fatalf("%s%v: behind %v, caught up %v: missing", name, ls, ok1, ok2)
		}
		vals := strings.TrimSpace(strings.Repeat(fmt.Sprintf("%g ", b), 5) + strings.Repeat(fmt.Sprintf("%g ", c), 5))
		fmt.Fprintf(&sb, "      - series: '%s{job=\"outbox_exporter\", outbox=%q, kind=%q}'\n        values: '%s'\n", name, outbox, kind, vals)
	}
	fmt.Fprintf(&sb, `    alert_rule_test:
      - eval_time: 3m
        alertname: OutboxNotificationDeadlineMissed
        exp_alerts:
          - exp_labels: {severity: critical, job: outbox_exporter, outbox: %s, kind: %s}
      - eval_time: 8m
        alertname: OutboxNotificationDeadlineMissed
        exp_alerts: []
`, outbox, kind)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.PromtoolTestRules(t, dir, "test.yml", sb.String())
}
