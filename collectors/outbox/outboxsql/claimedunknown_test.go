package outboxsql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// TestClaimedUnknownIndexServesItsWalk: in a table where many claimed
// rows have passed leases and few an unknown result, the walk of the
// claimed rows with an unknown result reads the claimed_unknown index
// check asks for (its predicate is implied by the walk's condition, which
// adds the lease's time), not the lease index it would filter, under
// each way a claimed row can have an unknown result:
// attempts after a passed lease (with lease_until, or claimed_at and a
// lease length), an unknown status, unknown_when.
func TestClaimedUnknownIndexServesItsWalk(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE cu (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, kind text NOT NULL, status text NOT NULL,
	  lease_until timestamptz, claimed_at timestamptz, attempts int NOT NULL DEFAULT 0, flag boolean)`)
	// A relay holding a huge batch it has not tried yet: 20,000 claimed
	// rows with passed leases, a few of them retried, one in a thousand
	// of unknown status or flagged.
	db.Exec(t, `INSERT INTO cu SELECT i, now() - interval '1 hour', 'k' || (i % 50), CASE WHEN i % 1000 = 1 THEN 'MAYBE' ELSE 'CLAIMED' END,
	    now() - interval '1 minute', now() - interval '2 minutes', CASE WHEN i % 1000 = 2 THEN 1 ELSE 0 END, i % 1000 = 3
	  FROM generate_series(1, 20000) i`)
	base := func() *config.Outbox {
		return &config.Outbox{Table: "cu", ID: "id", CreatedAt: "created_at", Labels: []config.Label{{Name: "kind", Column: "kind"}},
			Status: "status", Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED", "MAYBE"}, Published: []string{"PUBLISHED"},
			Deadline: time.Minute, MaxCount: 100, MaxLabelValues: 10}
	}
	cases := map[string]func(o *config.Outbox){
		"attempts, lease_until": func(o *config.Outbox) { o.LeaseUntil, o.Attempts = "lease_until", "attempts" },
		"attempts, claimed_at and lease_ttl": func(o *config.Outbox) {
			o.ClaimedAt, o.LeaseTTL, o.Attempts = "claimed_at", time.Minute, "attempts"
		},
		"unknown status, attempts": func(o *config.Outbox) {
			o.LeaseUntil, o.Attempts, o.Unknown = "lease_until", "attempts", []string{"MAYBE"}
		},
		"unknown_when, attempts": func(o *config.Outbox) {
			o.LeaseUntil, o.Attempts, o.UnknownWhen = "lease_until", "attempts", "flag"
		},
	}
	for name, set := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			o := base()
			set(o)
			cols, err := outboxsql.Introspect(ctx, db.Admin, "cu")
			if err != nil {
				t.Fatal(err)
			}
			s, err := outboxsql.NewSpec("cu", o, cols)
			if err != nil {
				t.Fatal(err)
			}
			ix, ok := s.Indexes()["claimed_unknown"]
			if !ok || s.ClaimedUnknownPart() == "" {
				t.Fatalf("no claimed_unknown index (%v) or no unknown part (%q)", ok, s.ClaimedUnknownPart())
			}
			tx, err := db.Admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			// Every index check asks for, so the planner has the lease
			// index to pick instead.
			for _, x := range s.Indexes() {
				if _, err := tx.Exec(ctx, strings.Replace(x.SQL("cu"), "CONCURRENTLY ", "", 1)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := tx.Exec(ctx, "ANALYZE cu"); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
				t.Fatal(err)
			}
			var plan strings.Builder
			rows, err := tx.Query(ctx, "EXPLAIN "+s.ClaimedWalkQuery(s.ClaimedUnknownPart(), s.ClaimedBudget()))
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan.WriteString(line + "\n")
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(plan.String(), ix.Name) {
				t.Errorf("the walk of the unknown results does not read %s:\n%s", ix.Name, plan.String())
			}
		})
	}
}
