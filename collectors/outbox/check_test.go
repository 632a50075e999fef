package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

func setup(t *testing.T, schema string) (*pgtest.DB, *pgxpool.Pool) {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, schema)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pg.Open(ctx, &config.Database{DSN: config.Secret(db.URL), MaxConnections: 2,
		StatementTimeout: 10 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return db, pool
}

const schema = `CREATE TABLE outbox (
  event_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  created_at timestamptz NOT NULL DEFAULT now(),
  event_type text NOT NULL, topic text NOT NULL DEFAULT 't',
  status text NOT NULL DEFAULT 'PENDING',
  published_at timestamptz, lease_until timestamptz,
  attempts int NOT NULL DEFAULT 0, last_error text);`

func cfg() *config.Outbox {
	return &config.Outbox{Table: "public.outbox", ID: "event_id", CreatedAt: "created_at",
		Labels: []config.Label{{Name: "event_type", Column: "event_type"}, {Name: "destination", Column: "topic"}},
		Status: "status", Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED"}, Published: []string{"PUBLISHED"},
		Dead: []string{"ABANDONED"}, PublishedAt: "published_at", LeaseUntil: "lease_until", Attempts: "attempts",
		LastError: "last_error", Deadline: time.Minute, MaxLabelValues: 100, MaxCount: 100000}
}

func check(t *testing.T, pool *pgxpool.Pool, name string, o *config.Outbox) *CheckReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := Check(ctx, pool, name, o)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	t.Logf("\n%s", r.Text())
	return r
}

func TestCheckPrintsIndexesThenPasses(t *testing.T) {
	cases := []struct {
		name   string
		schema string
		o      func() *config.Outbox
		want   int // statements wanted
	}{
		{"status", schema, cfg, 8},
		{"timestamps claimed_at", `CREATE TABLE ev (id bigint, created_at timestamp, kind text, published_at timestamp, dead_at timestamptz, claimed_at timestamptz)`,
			func() *config.Outbox {
				return &config.Outbox{Table: "ev", ID: "id", CreatedAt: "created_at", Labels: []config.Label{{Name: "kind", Column: "kind"}},
					PublishedAt: "published_at", DeadAt: "dead_at", ClaimedAt: "claimed_at", LeaseTTL: time.Minute,
					Deadline: time.Minute, MaxLabelValues: 10, MaxCount: 10}
			}, 7},
		{"delete-on-publish", `CREATE TABLE q (id bigint, created_at timestamptz)`,
			func() *config.Outbox {
				return &config.Outbox{Table: "q", ID: "id", CreatedAt: "created_at", Deadline: time.Minute, MaxLabelValues: 10, MaxCount: 10}
			}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db, pool := setup(t, c.schema)
			r := check(t, pool, "m", c.o())
			if r.OK {
				t.Fatal("check passed on a table without indexes")
			}
			if len(r.Statements) != c.want {
				t.Fatalf("statements %q, want %d", r.Statements, c.want)
			}
			for _, s := range r.Statements {
				if !strings.HasPrefix(s, "CREATE INDEX CONCURRENTLY IF NOT EXISTS \"outbox_exporter_m_") {
					t.Errorf("statement %q", s)
				}
				db.Exec(t, s)
				db.Exec(t, s) // IF NOT EXISTS: a rerun is harmless
			}
			r = check(t, pool, "m", c.o())
			if !r.OK || len(r.Statements) != 0 {
				t.Fatalf("check after creating the indexes: ok %v, statements %q", r.OK, r.Statements)
			}
		})
	}
}

func TestCheckColumnsAndTypes(t *testing.T) {
	_, pool := setup(t, `CREATE TABLE outbox (event_id int, created_at text, event_type text, topic text, status json,
	  published_at timestamptz, lease_until timestamptz, attempts text)`)
	r := check(t, pool, "m", cfg())
	if r.OK {
		t.Fatal("check passed")
	}
	text := r.Text()
	for _, want := range []string{
		"column created_at = created_at: is text, want timestamp",
		"column status = status: is json, want a text, enum, integer or boolean type",
		"column attempts = attempts: is text, want an integer type",
		"column last_error = last_error: does not exist",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	o := cfg()
	o.Table = "public.nope"
	if r := check(t, pool, "m", o); r.OK || !strings.Contains(r.Text(), "does not exist") {
		t.Errorf("missing table: %s", r.Text())
	}
}

func TestCheckIntegerStatusAndBadFilter(t *testing.T) {
	_, pool := setup(t, `CREATE TABLE outbox (event_id int, created_at timestamptz, event_type text, topic text, status int2,
	  published_at timestamptz, lease_until timestamptz, attempts int, last_error text)`)
	o := cfg()
	r := check(t, pool, "m", o)
	if r.OK || !strings.Contains(r.Text(), `status value "PENDING" is not an integer`) {
		t.Errorf("text statuses on an integer column: %s", r.Text())
	}
	o.Pending, o.InFlight, o.Published, o.Dead = []string{"0"}, []string{"1"}, []string{"2"}, []string{"3"}
	r = check(t, pool, "m", o)
	if len(r.Statements) == 0 || !strings.Contains(r.Statements[0], `WHERE "status" IN (0,1)`) {
		t.Errorf("integer statuses are not inlined as integers: %q", r.Statements)
	}
	o.Filter = "no_such_column = 1"
	if r := check(t, pool, "m", o); r.OK || !strings.Contains(r.Text(), "does not plan") {
		t.Errorf("bad filter: %s", r.Text())
	}
}
