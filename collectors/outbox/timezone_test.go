package outbox

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// TestStateQueryIndexFriendlyOnTimestamp: on a `timestamp without time
// zone` column the state query (a walk in time order) orders by the column itself,
// so the index returns its first entries in order (a Limit over the index,
// no Sort), instead of converting every entry (a sort of the backlog).
func TestStateQueryIndexFriendlyOnTimestamp(t *testing.T) {
	for _, zone := range []string{"", "UTC"} {
		t.Run("time_zone="+zone, func(t *testing.T) {
			db, pool := setup(t, `CREATE TABLE q (id bigint PRIMARY KEY, created_at timestamp NOT NULL, status text NOT NULL);
			  INSERT INTO q SELECT g, '2020-01-01'::timestamp + g * interval '1 second', CASE WHEN g % 10 = 0 THEN 'PENDING' ELSE 'PUBLISHED' END
			  FROM generate_series(1, 50000) g`)
			o := &config.Outbox{Table: "q", ID: "id", CreatedAt: "created_at", Status: "status", Pending: []string{"PENDING"},
				Published: []string{"PUBLISHED"}, Deadline: time.Minute, MaxLabelValues: 10, MaxCount: 10, TimeZone: zone}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cols, err := outboxsql.Introspect(ctx, pool, "q")
			if err != nil {
				t.Fatal(err)
			}
			s, err := outboxsql.NewSpec("q", o, cols)
			if err != nil {
				t.Fatal(err)
			}
			db.Exec(t, s.Indexes()["unpublished"].SQL("q"))
			db.Exec(t, "ANALYZE q")
			var plan string
			if err := pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+s.StateQuery()).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(plan, `"Node Type": "Limit"`) || !strings.Contains(plan, s.Indexes()["unpublished"].Name) ||
				regexp.MustCompile(`"Sort Key": \[[^\]]*created_at`).MatchString(plan) {
				t.Fatalf("the state query does not read the index in order:\n%s\n%s", s.StateQuery(), plan)
			}
		})
	}
}

// TestCheckSaysZoneAndUnnamedStatuses: check says in which zone it reads
// timestamp columns, and lists the status values the config names in no
// state, with counts, through the unclassified index.
func TestCheckSaysZoneAndUnnamedStatuses(t *testing.T) {
	db, pool := setup(t, `CREATE TABLE outbox (event_id bigint PRIMARY KEY, created_at timestamp NOT NULL DEFAULT now(),
	  status text, published_at timestamp);
	  INSERT INTO outbox (event_id, status) VALUES (1, 'PENDING'), (2, 'PUBLISHED'), (3, NULL), (4, 'WEIRD'), (5, 'WEIRD')`)
	o := &config.Outbox{Table: "public.outbox", ID: "event_id", CreatedAt: "created_at", Status: "status",
		Pending: []string{"PENDING"}, Published: []string{"PUBLISHED"}, PublishedAt: "published_at",
		Deadline: time.Minute, MaxLabelValues: 10, MaxCount: 10}
	r := check(t, pool, "m", o)
	if !strings.Contains(r.Text(), "created_at, published_at are timestamp without time zone, read as the session's TimeZone") ||
		!strings.Contains(r.Text(), "were not looked for") {
		t.Errorf("report before the indexes:\n%s", r.Text())
	}
	for _, s := range r.Statements {
		db.Exec(t, s)
	}
	o.TimeZone = "UTC"
	r = check(t, pool, "m", o)
	text := r.Text()
	for _, want := range []string{"read as UTC (time_zone)", `"WEIRD" (2 rows), NULL (1 rows)`} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if !r.OK {
		t.Errorf("check not OK after creating its indexes:\n%s", text)
	}
}
