package discover

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "libraries", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var createIndex = regexp.MustCompile(`(?m)^    #   (CREATE INDEX CONCURRENTLY .*;)$`)

// TestDiscoverIsReady: on a database holding the libraries' own tables, a
// hand-made outbox and a table of orders, discover, run as a role that may
// read no table at all (so it cannot have read a row), writes a
// configuration that loads, names each library's preset and generation,
// and passes check once the indexes it lists exist.
func TestDiscoverIsReady(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, fixture(t, "spring-modulith-2.sql"))
	db.Exec(t, fixture(t, "namastack.sql"))
	db.Exec(t, fixture(t, "masstransit.sql"))
	db.Exec(t, "CREATE SCHEMA dbz; SET search_path TO dbz; "+fixture(t, "debezium-outbox.sql")+"; RESET search_path")
	db.Exec(t, strings.ReplaceAll(fixture(t, "nservicebus.sql"), `"OutboxData"`, `"Sales_OutboxData"`))
	db.Exec(t, strings.ReplaceAll(fixture(t, "eventuate-tram.sql"), "${EVENTUATE_OUTBOX_SUFFIX}", ""))
	db.Exec(t, "CREATE SCHEMA v1; SET search_path TO v1; "+fixture(t, "spring-modulith-1.sql")+"; RESET search_path")
	db.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, status text, created_at timestamptz);
CREATE TABLE app_outbox (event_id uuid PRIMARY KEY, created_at timestamptz NOT NULL, topic text, status text, published_at timestamptz, attempts int)`)
	role := "disc_" + strings.TrimPrefix(db.Name, "oxt_")
	db.Exec(t, "CREATE ROLE "+role+" LOGIN; REVOKE ALL ON SCHEMA public FROM PUBLIC")
	t.Cleanup(func() { db.Exec(t, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	u, _ := url.Parse(db.URL)
	u.User = url.User(role)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := Scan(ctx, "main", &config.Database{DSN: config.Secret(u.String()), MaxConnections: 1, StatementTimeout: 5 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render([]Database{d}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{"preset: spring-modulith  # Spring Modulith event publication registry (JDBC, JPA), schema 2.x",
		"preset: spring-modulith  # Spring Modulith event publication registry (JDBC, JPA), schema 1.x\n    table: v1.event_publication",
		"preset: namastack", "preset: masstransit", "preset: eventuate-tram", "table: public.app_outbox",
		"preset: debezium-outbox  # Debezium outbox event router (its default table), schema 3.x\n    table: dbz.outbox",
		"preset: nservicebus  # NServiceBus SQL persistence outbox (PostgreSQL), schema SQL persistence\n    table: public.Sales_OutboxData"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "orders") {
		t.Error("the orders table was written as an outbox")
	}
	cfg, err := config.Parse([]byte(out), func(k string) (string, bool) { return db.URL, k == DSNVariable })
	if err != nil {
		t.Fatalf("the configuration written does not load: %v", err)
	}
	if len(cfg.Outboxes) != 8 {
		t.Errorf("%d outboxes written, want 8", len(cfg.Outboxes))
	}
	for _, m := range createIndex.FindAllStringSubmatch(out, -1) {
		db.Exec(t, m[1])
	}
	pool, err := pg.Open(ctx, cfg.Databases["main"])
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for name, o := range cfg.Outboxes {
		r, err := outbox.Check(ctx, pool, name, o)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			t.Errorf("check of %s fails after the indexes discover listed:\n%s", name, r.Text())
		}
	}
}
