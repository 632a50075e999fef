package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

func TestOutboxOddIdentifiers(t *testing.T) {
	// Injection is refused by the config; a legit odd name is quoted.
	_, err := config.Parse([]byte(`
databases: {main: {dsn: "postgres://x@127.0.0.1/x"}}
outboxes:
  m:
    database: main
    table: public.outbox
    id: id
    created_at: "created_at; DROP TABLE outbox"
    deadline: 5m
`), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "outboxes.m.created_at") {
		t.Fatalf("config with an injected column = %v, want an error naming outboxes.m.created_at", err)
	}
	_, pool, _ := obSetup(t, `CREATE TABLE "Outbox" ("select" text NOT NULL, "from" timestamptz NOT NULL, "Order" text, id int);
	  INSERT INTO "Outbox" VALUES ('it''s', now() - interval '1 minute', 'o''1', 1), ('DONE', now(), 'x', 2)`)
	o := obDefaults(&config.Outbox{Table: "public.Outbox", CreatedAt: "from", Status: "select",
		Pending: []string{"it's"}, Published: []string{"DONE"}, Labels: []config.Label{{Name: "order", Column: "Order"}}})
	ms := obScrape(t, NewCollector("odd", o, pool, testutil.Quiet()))
	if v := obValue(t, ms, "outbox_events", map[string]string{"state": "pending", "order": "o'1"}); v != 1 {
		t.Errorf("pending = %v, want 1", v)
	}
}

func TestOutboxFilterCannotWrite(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema+`CREATE SEQUENCE s; INSERT INTO outbox (event_type) VALUES ('x');`)
	o := obStatusOutbox()
	o.Filter = "nextval('s') > 0"
	_, err := obTryScrape(NewCollector("m", o, pool, testutil.Quiet()), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("scrape with a writing filter = %v, want a read-only error", err)
	}
	var n int64
	if err := db.Admin.QueryRow(context.Background(), `SELECT last_value FROM s`).Scan(&n); err != nil || n != 1 {
		t.Errorf("sequence moved: %v %v", n, err)
	}
}

func obSuccess(t *testing.T, ms []prometheus.Metric) float64 {
	t.Helper()
	return obValue(t, ms, "outbox_exporter_collector_success", map[string]string{"collector": "outbox"})
}

func TestOutboxLockedTableBoundedByDeadline(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema+`INSERT INTO outbox (event_type) VALUES ('x');`)
	c := NewCollector("m", obStatusOutbox(), pool, testutil.Quiet())
	e := collectors.NewExporter(testutil.Quiet(), c)
	ctx := context.Background()
	tx := db.Begin(t)
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	var ms []prometheus.Metric
	testutil.Bounded(t, "a scrape of a locked table", time.Second, func() { ms = e.Collect(sctx) })
	cancel()
	if v := obSuccess(t, ms); v != 0 {
		t.Errorf("success while locked = %v, want 0", v)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ms = e.Collect(sctx)
	if v := obSuccess(t, ms); v != 1 {
		t.Errorf("success after the lock = %v, want 1", v)
	}
	if v := obValue(t, ms, "outbox_events", map[string]string{"state": "pending"}); v != 1 {
		t.Errorf("pending after the lock = %v, want 1", v)
	}
}

func TestOutboxDatabaseRefusesConnectionsAndComesBack(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema+`INSERT INTO outbox (event_type) VALUES ('x');`)
	e := collectors.NewExporter(testutil.Quiet(), NewCollector("m", obStatusOutbox(), pool, testutil.Quiet()))
	scrape := func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return obSuccess(t, e.Collect(ctx))
	}
	if v := scrape(); v != 1 {
		t.Fatalf("first scrape success = %v", v)
	}
	ctx := context.Background()
	server, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close(ctx)
	name := pgx.Identifier{db.Name}.Sanitize()
	if _, err := server.Exec(ctx, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = server.Exec(context.Background(), "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true") })
	if _, err := server.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
		db.Name, pg.ApplicationName); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if v := scrape(); v != 0 {
			t.Errorf("scrape %d while the database refuses connections: success %v, want 0", i, v)
		}
	}
	if _, err := server.Exec(ctx, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	// The pool reconnects by itself; allow it a few scrapes to drop the
	// sessions the server killed.
	ok := false
	for i := 0; i < 5 && !ok; i++ {
		ok = scrape() == 1
	}
	if !ok {
		t.Error("no successful scrape after the database allowed connections again")
	}
}
