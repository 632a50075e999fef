package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestReloadChangedDatabaseKeepsCounters: an outbox's counters and lease
// memory belong to the outbox, not to its database's pool. A reload that
// changes the databases entry (statement_timeout, then the DSN itself, as
// a failover by editing the DSN does) builds a new pool, and every row
// published between the last scrape before the reload and the first one
// after it is still counted, once.
func TestReloadChangedDatabaseKeepsCounters(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, reloadSchema+`INSERT INTO outbox (id) SELECT g FROM generate_series(1, 60) g`)
	ctx := context.Background()
	logger := testutil.Quiet()
	cfg := parseReload(t, db.URL, "1m", "10m")
	a, err := Build(ctx, cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	a.Start(ctx)
	defer func() { a.Close() }()
	if v, ok := published(t, a); v != 0 || !ok {
		t.Fatalf("first scrape: published %v, success %v", v, ok)
	}
	changes := []struct {
		what   string
		change func(*config.Database)
	}{
		{"statement_timeout", func(d *config.Database) { d.StatementTimeout = 7 * time.Second }},
		{"dsn", func(d *config.Database) { d.DSN = config.Secret(db.URL + "&connect_timeout=9") }},
		{"max_connections", func(d *config.Database) { d.MaxConnections = 3 }},
	}
	want, next := 0.0, 1
	for _, ch := range changes {
		// Published in the reload window: after the old App's last scrape,
		// before the new App's first.
		db.Exec(t, fmt.Sprintf(`UPDATE outbox SET status = 'PUBLISHED', published_at = now()
			WHERE id BETWEEN %d AND %d`, next, next+9))
		next += 10
		want += 10
		ncfg := parseReload(t, db.URL, "1m", "10m")
		*ncfg.Databases["main"] = *a.Config.Databases["main"]
		ch.change(ncfg.Databases["main"])
		b, err := Rebuild(ctx, ncfg, logger, a)
		if err != nil {
			t.Fatalf("reload changing %s: %v", ch.what, err)
		}
		b.Start(ctx)
		old := a
		a = b
		old.Close()
		if a.Pools["main"] == old.Pools["main"] {
			t.Fatalf("reload changing %s kept the old pool", ch.what)
		}
		if v, ok := published(t, a); v != want || !ok {
			t.Fatalf("after a reload changing %s: published %v, want %v (every row published in the reload window), success %v",
				ch.what, v, want, ok)
		}
	}
	// And counting goes on after the last reload.
	db.Exec(t, `UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE id = 60`)
	if v, _ := published(t, a); v != want+1 {
		t.Fatalf("after the reloads: published %v, want %v", v, want+1)
	}
}
