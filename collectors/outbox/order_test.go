package outbox

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

const orderSchema = `
CREATE TABLE outbox (
  id bigserial PRIMARY KEY,
  created_at timestamptz NOT NULL DEFAULT now(),
  event_type text NOT NULL,
  conversation_id text NOT NULL,
  seq int8 NOT NULL,
  status text NOT NULL DEFAULT 'PENDING',
  published_at timestamptz,
  receipt_id text
);`

func orderOutbox() *config.Outbox {
	return obDefaults(&config.Outbox{
		Table: "public.outbox", Labels: []config.Label{{Name: "event_type", Column: "event_type"}},
		Status: "status", Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED"}, Published: []string{"PUBLISHED"},
		Dead: []string{"ABANDONED"}, PublishedAt: "published_at",
		Aggregate: "conversation_id", Sequence: "seq", Receipt: "receipt_id",
	})
}

// orderRow is one row of a generated state, as the oracle sees it.
type orderRow struct {
	kind, agg string
	seq       int
	status    string
}

// orderOracle counts, by event type, the unpublished rows whose
// aggregate has a published row with a higher sequence, by comparing
// every pair of rows.
func orderOracle(rows []orderRow) map[string]float64 {
	out := map[string]float64{}
	for _, r := range rows {
		if r.status != "PENDING" && r.status != "CLAIMED" {
			continue
		}
		for _, p := range rows {
			if p.agg == r.agg && p.seq > r.seq && p.status == "PUBLISHED" {
				out[r.kind]++
				break
			}
		}
	}
	return out
}

// genOrder makes a state of many aggregates: each a run of sequences,
// with gaps, published in order up to a point, then unpublished; with
// inversions=true some aggregates also have a later row published ahead
// of an earlier one, as two relays would leave them.
func genOrder(rng *rand.Rand, aggregates int, inversions bool) []orderRow {
	var rows []orderRow
	kinds := []string{"msg.sent", "msg.edited", "msg.deleted"}
	for a := 0; a < aggregates; a++ {
		n := 1 + rng.Intn(6)
		cut := rng.Intn(n + 1) // rows [0, cut) published
		seq := 0
		for i := 0; i < n; i++ {
			seq += 1 + rng.Intn(2) // gaps: 9 then 11
			st := "PENDING"
			switch {
			case i < cut:
				st = "PUBLISHED"
			case rng.Intn(3) == 0:
				st = "CLAIMED"
			}
			if st == "PUBLISHED" && rng.Intn(20) == 0 {
				st = "ABANDONED" // a dead row in the middle overtakes nothing
			}
			rows = append(rows, orderRow{kinds[rng.Intn(len(kinds))], fmt.Sprintf("c%d", a), seq, st})
		}
		if inversions && cut < n && rng.Intn(4) == 0 {
			// The successor published by another relay: a later row of
			// the unpublished tail marked published.
			j := len(rows) - 1 - rng.Intn(n-cut)
			rows[j].status = "PUBLISHED"
		}
	}
	return rows
}

func insertOrder(t *testing.T, db interface {
	Exec(testing.TB, string, ...any)
}, rows []orderRow) {
	t.Helper()
	var b strings.Builder
	b.WriteString("INSERT INTO outbox (event_type, conversation_id, seq, status, published_at, receipt_id) VALUES ")
	for i, r := range rows {
		if i > 0 {
			b.WriteString(",")
		}
		pub := "NULL"
		if r.status == "PUBLISHED" {
			pub = "now() - interval '1 hour'"
		}
		fmt.Fprintf(&b, "('%s','%s',%d,'%s',%s,'r%d')", r.kind, r.agg, r.seq, r.status, pub, i)
	}
	db.Exec(t, b.String())
}

// Seeded states compared with the brute-force oracle: the inverted rows
// counted exactly per label value, gaps and dead rows never counted, and
// a healthy stream of many aggregates reporting 0. Seeds that once found
// a fault stay in the list.
func TestOutOfOrderAgainstOracle(t *testing.T) {
	db, pool, _ := obSetup(t, orderSchema)
	for _, tc := range []struct {
		seed       int64
		aggregates int
		inversions bool
	}{{1, 500, false}, {2, 500, true}, {3, 2000, true}, {4, 50, true}, {5, 3000, false}} {
		t.Run(fmt.Sprintf("seed%d", tc.seed), func(t *testing.T) {
			db.Exec(t, "TRUNCATE outbox")
			rows := genOrder(rand.New(rand.NewSource(tc.seed)), tc.aggregates, tc.inversions)
			insertOrder(t, db, rows)
			want := orderOracle(rows)
			total := 0.0
			for _, v := range want {
				total += v
			}
			if tc.inversions && total == 0 || !tc.inversions && total != 0 {
				t.Fatalf("generator: %v inverted rows with inversions=%v", total, tc.inversions)
			}
			c := NewCollector("messages", orderOutbox(), pool, testutil.Quiet())
			ms := obScrape(t, c)
			for _, k := range []string{"msg.sent", "msg.edited", "msg.deleted"} {
				if got := obValue(t, ms, "outbox_out_of_order_events", map[string]string{"event_type": k}); got != want[k] {
					t.Errorf("%s: out of order %v, want %v", k, got, want[k])
				}
			}
		})
	}
}

// E9 stuck, E10 published: one row out of order; a gap (9 published, 11
// pending) is not; once E9 is published the count returns to 0.
func TestOutOfOrderE9E10AndGap(t *testing.T) {
	db, pool, _ := obSetup(t, orderSchema)
	db.Exec(t, `INSERT INTO outbox (event_type, conversation_id, seq, status, published_at) VALUES
	  ('msg.sent', 'conv-1', 9, 'CLAIMED', NULL),
	  ('msg.sent', 'conv-1', 10, 'PUBLISHED', now()),
	  ('msg.sent', 'conv-2', 9, 'PUBLISHED', now()),
	  ('msg.sent', 'conv-2', 11, 'PENDING', NULL)`)
	// Older rows of other aggregates, so that E9 is not among the oldest.
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, conversation_id, seq)
	  SELECT now() - interval '1 hour', 'msg.sent', 'old-' || g, 1 FROM generate_series(1, 10) g`)
	c := NewCollector("messages", orderOutbox(), pool, testutil.Quiet())
	if got := obValue(t, obScrape(t, c), "outbox_out_of_order_events", nil); got != 1 {
		t.Fatalf("E9 behind E10: out of order %v, want 1", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := Stuck(ctx, pool, "messages", orderOutbox(), 3)
	if err != nil {
		t.Fatal(err)
	}
	var found []StuckRow
	for _, r := range rows {
		if r.Order != nil {
			found = append(found, r)
		}
	}
	if len(rows) != 4 || len(found) != 1 || *found[0].Order != (StuckOrder{Aggregate: "conv-1", Sequence: "9", OvertakenBy: "10"}) ||
		found[0].State != InFlight || rows[3].ID != found[0].ID {
		t.Fatalf("stuck rows %+v, want the 3 oldest and E9 last, overtaken by 10", rows)
	}
	db.Exec(t, `UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE conversation_id = 'conv-1' AND seq = 9`)
	if got := obValue(t, obScrape(t, c), "outbox_out_of_order_events", nil); got != 0 {
		t.Fatalf("after E9 published: out of order %v, want 0", got)
	}
}

// An aggregate deleted and created anew under the same id, counting from
// 1 again, while a published row of its first life remains: its new
// unpublished rows show as overtaken (the documented limit) until the old
// rows are purged.
func TestOutOfOrderSequenceRestartAfterDelete(t *testing.T) {
	db, pool, _ := obSetup(t, orderSchema)
	db.Exec(t, `INSERT INTO outbox (event_type, conversation_id, seq, status, published_at) VALUES
	  ('msg.sent', 'conv-1', 1, 'PUBLISHED', now() - interval '1 hour'), ('msg.sent', 'conv-1', 2, 'PUBLISHED', now() - interval '1 hour'),
	  ('msg.sent', 'conv-1', 3, 'PUBLISHED', now() - interval '1 hour')`)
	c := NewCollector("messages", orderOutbox(), pool, testutil.Quiet())
	if got := obValue(t, obScrape(t, c), "outbox_out_of_order_events", nil); got != 0 {
		t.Fatalf("first life: %v, want 0", got)
	}
	// The aggregate's business rows deleted; its old outbox rows kept by
	// retention; the new life starts at 1. No row was published, so only
	// the next full scan sees it (documented).
	db.Exec(t, `INSERT INTO outbox (event_type, conversation_id, seq) VALUES ('msg.sent', 'conv-1', 1), ('msg.sent', 'conv-1', 2)`)
	if got := obValue(t, obScrape(t, c), "outbox_out_of_order_events", nil); got != 0 {
		t.Fatalf("restarted sequence before a full scan: %v, want 0", got)
	}
	c.sampler.order.rescan = time.Nanosecond
	if got := obValue(t, obScrape(t, c), "outbox_out_of_order_events", nil); got != 2 {
		t.Fatalf("restarted sequence with old rows present, at the full scan: %v, want 2 (documented)", got)
	}
	c.sampler.order.rescan = time.Hour
	db.Exec(t, `DELETE FROM outbox WHERE status = 'PUBLISHED'`)
	if got := obValue(t, obScrape(t, c), "outbox_out_of_order_events", nil); got != 0 {
		t.Fatalf("after the old rows are purged: %v, want 0", got)
	}
}

// Rows seen becoming published are counted by whether they carry a
// receipt: NULL and empty are none; rows published before the exporter
// started are not counted, and a re-read row is not counted twice.
func TestPublishedWithoutReceipt(t *testing.T) {
	db, pool, _ := obSetup(t, orderSchema)
	db.Exec(t, `INSERT INTO outbox (event_type, conversation_id, seq, status, published_at, receipt_id) VALUES
	  ('msg.sent', 'h', 1, 'PUBLISHED', now() - interval '5 seconds', NULL)`)
	db.Exec(t, `INSERT INTO outbox (event_type, conversation_id, seq) SELECT 'msg.sent', 'c' || g, 1 FROM generate_series(1, 6) g`)
	c := NewCollector("messages", orderOutbox(), pool, testutil.Quiet())
	if got := obValue(t, obScrape(t, c), "outbox_published_without_receipt_events_total", nil); got != 0 {
		t.Fatalf("at start: %v, want 0 (history is not counted)", got)
	}
	db.Exec(t, `UPDATE outbox SET status = 'PUBLISHED', published_at = now(), receipt_id = CASE
	  WHEN conversation_id IN ('c1', 'c2', 'c3') THEN 'gw-' || conversation_id
	  WHEN conversation_id = 'c4' THEN '' END WHERE conversation_id LIKE 'c%'`)
	ms := obScrape(t, c)
	if got := obValue(t, ms, "outbox_published_without_receipt_events_total", nil); got != 3 {
		t.Errorf("receipt-less publishes %v, want 3 (c4 empty, c5 and c6 NULL)", got)
	}
	if got := obValue(t, ms, "outbox_published_events_total", nil); got != 6 {
		t.Errorf("published %v, want 6", got)
	}
	if got := obValue(t, obScrape(t, c), "outbox_published_without_receipt_events_total", nil); got != 3 {
		t.Errorf("re-read: %v, want still 3", got)
	}
}

// check asks for the (aggregate, sequence) index, and is satisfied once
// it exists.
func TestCheckAsksForAggregateIndex(t *testing.T) {
	db, pool, _ := obSetup(t, orderSchema)
	o := orderOutbox()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec, err := outboxsql.NewSpec("messages", o, map[string]outboxsql.Column{"status": {Name: "status", Type: "text", Category: "S"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ix := range spec.Indexes() {
		db.Exec(t, strings.Replace(ix.SQL(o.Table), " CONCURRENTLY", "", 1))
	}
	r, err := Check(ctx, pool, "messages", o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{spec.OrderIndexes()["aggregate"].SQL(o.Table), spec.OrderIndexes()["aggregate_unpublished"].SQL(o.Table)}
	if r.OK || strings.Join(r.Statements, "\n") != strings.Join(want, "\n") {
		t.Fatalf("without the aggregate indexes: ok=%v statements %q, want %q\n%s", r.OK, r.Statements, want, r.Text())
	}
	for _, w := range want {
		db.Exec(t, strings.Replace(w, " CONCURRENTLY", "", 1))
	}
	if r, err = Check(ctx, pool, "messages", o); err != nil || !r.OK {
		t.Fatalf("with it: %v\n%s", err, r.Text())
	}
	o.Sequence = "event_type"
	if r, err = Check(ctx, pool, "messages", o); err != nil || r.OK || !strings.Contains(r.Text(), "column sequence = event_type: is text, want an integer or numeric type") {
		t.Fatalf("text sequence accepted: %v\n%s", err, r.Text())
	}
}

// Between full scans the gauge follows the publishes: seeded steps that
// publish unpublished rows in random order (overtaking, and resolving
// earlier inversions), each scrape compared with the brute-force oracle
// over the whole table, with the full scan only at the first sample.
func TestOutOfOrderFollowsPublishes(t *testing.T) {
	db, pool, _ := obSetup(t, orderSchema)
	for _, seed := range []int64{11, 12, 13} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			db.Exec(t, "TRUNCATE outbox")
			rng := rand.New(rand.NewSource(seed))
			rows := genOrder(rng, 300, false)
			insertOrder(t, db, rows)
			c := NewCollector("messages", orderOutbox(), pool, testutil.Quiet())
			c.sampler.order.rescan = time.Hour
			check := func(step int) {
				t.Helper()
				ms := obScrape(t, c)
				want := orderOracle(rows)
				for _, k := range []string{"msg.sent", "msg.edited", "msg.deleted"} {
					if got := obValue(t, ms, "outbox_out_of_order_events", map[string]string{"event_type": k}); got != want[k] {
						t.Errorf("step %d, %s: out of order %v, want %v", step, k, got, want[k])
					}
				}
			}
			check(0)
			total := 0.0
			for step := 1; step <= 8; step++ {
				// Publish a random tenth of the unpublished rows, whatever
				// their order.
				var ids []string
				for i := range rows {
					if (rows[i].status == "PENDING" || rows[i].status == "CLAIMED") && rng.Intn(10) == 0 {
						rows[i].status = "PUBLISHED"
						ids = append(ids, fmt.Sprintf("'r%d'", i))
					}
				}
				if len(ids) > 0 {
					db.Exec(t, "UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE receipt_id IN ("+strings.Join(ids, ",")+")")
				}
				check(step)
				for _, v := range orderOracle(rows) {
					total += v
				}
			}
			if total == 0 {
				t.Fatal("the steps made no inversion: the test checks nothing")
			}
		})
	}
}
