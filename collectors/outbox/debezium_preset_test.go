package outbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// debeziumPresetYAML is the debezium-outbox preset with the time column
// an application adds beside it, linked to the slot its connector reads.
const debeziumPresetYAML = `
databases:
  main:
    dsn: postgres://exporter@127.0.0.1/app
outboxes:
  events:
    database: main
    preset: debezium-outbox
    created_at: created_at
    deadline: 1m
cdc:
  router:
    database: main
    slot: debezium
    deadline: 5m
    outbox: events
`

// TestDebeziumPresetBehindSlot: the Debezium router's own table (the
// libraries' fixture) with a created_at column added and the cdc link:
// the pending rows of each (aggregatetype, type) are exactly those the
// oracle finds committed after the slot's confirmed time, reading every
// row with its commit time; their age is bracketed by the server clock.
// The application here keeps its rows, so a count of the rows present
// would be wrong. Without created_at, the link is refused.
func TestDebeziumPresetBehindSlot(t *testing.T) {
	ddl, err := os.ReadFile("../../libraries/testdata/debezium-outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse([]byte(strings.Replace(debeziumPresetYAML, "    created_at: created_at\n", "", 1)), func(string) (string, bool) { return "", false }); err == nil ||
		!strings.Contains(err.Error(), "cdc.router.outbox") || !strings.Contains(err.Error(), "names an outbox with no created_at") {
		t.Errorf("the link without a time column: %v", err)
	}
	cfg, err := config.Parse([]byte(debeziumPresetYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	s := startCommitTS(t)
	s.exec(t, string(ddl))
	s.exec(t, `ALTER TABLE outbox ADD COLUMN created_at timestamptz NOT NULL DEFAULT now(), ADD COLUMN tx int`)
	ctx := context.Background()
	var behind int
	for seed := uint64(1); seed <= 3; seed++ {
		s.exec(t, `TRUNCATE outbox`)
		r := rand.New(rand.NewPCG(seed, 25))
		commits := writeRouterRows(ctx, t, s, r)
		j := r.IntN(len(commits) - 1)
		at := commits[j].Add(commits[j+1].Sub(commits[j]) / 2)
		smp := NewSampler("events", cfg.Outboxes["events"])
		smp.PublishedBySlot(DefaultBehindLookback)
		before := s.clock(t)
		snap, err := smp.SampleBehind(ctx, s.ro, Confirmed{At: at})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		after := s.clock(t)
		wants, n := routerTruth(ctx, t, s, at)
		behind += n
		got := map[string]Series{}
		for _, se := range snap.Series {
			got[joinLabels(se.Labels)] = se
		}
		for k, w := range wants {
			se := got[k]
			if int64(se.Events[Pending]) != w.pending {
				t.Errorf("seed %d %q: pending %v, the oracle %d", seed, k, se.Events[Pending], w.pending)
			}
			if lo, hi := before.Sub(w.oldest).Seconds()-1e-3, after.Sub(w.oldest).Seconds()+1e-3; se.OldestAge < lo || se.OldestAge > hi {
				t.Errorf("seed %d %q: oldest age %v, the oracle [%v, %v]", seed, k, se.OldestAge, lo, hi)
			}
		}
		for k, se := range got {
			if wants[k] == nil && se.Events[Pending] != 0 {
				t.Errorf("seed %d %q: %v pending, but no row of it is behind the slot", seed, k, se.Events[Pending])
			}
		}
	}
	if behind == 0 {
		t.Fatal("no row behind the slot in any seed: the test decides nothing")
	}
}

// writeRouterRows writes eight transactions of one to five rows in the
// event router's table, each row dated up to five minutes back, and
// returns each transaction's commit time.
func writeRouterRows(ctx context.Context, t *testing.T, s *commitTS, r *rand.Rand) []time.Time {
	t.Helper()
	commits := make([]time.Time, 8)
	for j := range commits {
		b := &pgx.Batch{}
		for range 1 + r.IntN(5) {
			b.Queue(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, created_at, tx)
VALUES (gen_random_uuid(), $1, 'a1', $2, '{}', clock_timestamp() - $3::interval, $4)`,
				[]string{"order", "payment"}[r.IntN(2)], []string{"Created", "Updated"}[r.IntN(2)], fmt.Sprintf("%d seconds", r.IntN(300)), j)
		}
		if err := pgx.BeginFunc(ctx, s.admin, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }); err != nil {
			t.Fatal(err)
		}
		if err := s.admin.QueryRow(ctx, `SELECT max(pg_xact_commit_timestamp(xmin)) FROM outbox WHERE tx = $1`, j).Scan(&commits[j]); err != nil {
			t.Fatal(err)
		}
	}
	return commits
}

// routerTruth is the oracle: every row committed after at, by label set,
// with the creation time of the oldest; n is how many rows that is.
func routerTruth(ctx context.Context, t *testing.T, s *commitTS, at time.Time) (wants map[string]*routerWant, n int) {
	t.Helper()
	wants = map[string]*routerWant{}
	rows, err := s.admin.Query(ctx, `SELECT aggregatetype, type, created_at, pg_xact_commit_timestamp(xmin) FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var agg, typ string
		var made, commit time.Time
		if err := rows.Scan(&agg, &typ, &made, &commit); err != nil {
			t.Fatal(err)
		}
		if !commit.After(at) {
			continue
		}
		n++
		k := joinLabels([]string{agg, typ})
		if wants[k] == nil {
			wants[k] = &routerWant{oldest: made}
		}
		wants[k].pending++
		if made.Before(wants[k].oldest) {
			wants[k].oldest = made
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return wants, n
}

// routerWant is what the oracle expects of one label set.
type routerWant struct {
	pending int64
	oldest  time.Time
}
