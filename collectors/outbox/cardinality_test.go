package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestStuckRowPastEveryCombinationCap: 200 event types × 60 destinations,
// 12,000 fresh rows (over max_count, so the counts are capped), and one
// hour-old "zz.payment.failed" row with a 30 s deadline override, whose
// combination sorts after every other. The skip-scan stops after
// MaxOldestTuples combinations in index order; the old row must still
// have its series, with its true age, count past its deadline, and lead
// the stuck rows. (It once had no series, past-deadline 0, and the stuck
// list showed 1-second-old rows.)
func TestStuckRowPastEveryCombinationCap(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic)
	    SELECT now() - interval '1 second', 'ev.' || lpad(e::text, 3, '0'), 'dest.' || lpad(d::text, 2, '0')
	    FROM generate_series(1, 200) e, generate_series(1, 60) d;
	  INSERT INTO outbox (created_at, event_type, topic) VALUES (now() - interval '1 hour', 'zz.payment.failed', 'payments');
	  ANALYZE outbox`)
	o := obStatusOutbox()
	o.Deadlines["zz.payment.failed"] = 30 * time.Second
	cols, err := outboxsql.Introspect(context.Background(), db.Admin, o.Table)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := outboxsql.NewSpec("ob", o, cols)
	if err != nil {
		t.Fatal(err)
	}
	for _, ix := range spec.Indexes() {
		db.Exec(t, strings.Replace(ix.SQL(o.Table), "CONCURRENTLY ", "", 1))
	}
	c := NewCollector("ob", o, pool, testutil.Quiet())
	ms := scrapeMany(t, c)
	zz := map[string]string{"outbox": "ob", "event_type": "zz.payment.failed"} // its destination may fold into "other"
	if v := obValue(t, ms, "outbox_events_capped", map[string]string{"outbox": "ob"}); v != 1 {
		t.Fatalf("outbox_events_capped %v, want 1 (the test needs the capped reads)", v)
	}
	obNear(t, "the zz series' oldest age", obValue(t, ms, "outbox_oldest_pending_age_seconds", zz), 3600, 60)
	if v := obValue(t, ms, "outbox_past_deadline_events", zz); v < 1 {
		t.Errorf("the zz series' past-deadline count %v, want at least 1", v)
	}
	if v := obValue(t, ms, "outbox_deadline_seconds", zz); v != 30 {
		t.Errorf("the zz series' deadline %v, want its override 30", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := Stuck(ctx, pool, "ob", o, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 || rows[0].Labels["event_type"] != "zz.payment.failed" || rows[0].AgeSeconds < 3500 || !rows[0].PastDeadline {
		t.Fatalf("stuck rows lead with %+v, want the hour-old zz.payment.failed row", rows)
	}
}

// scrapeMany is obScrape for a collector that may send more metrics than
// obScrape's buffer holds.
func scrapeMany(t *testing.T, c *Collector) []prometheus.Metric {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch := make(chan prometheus.Metric)
	done := make(chan []prometheus.Metric)
	go func() {
		var ms []prometheus.Metric
		for m := range ch {
			ms = append(ms, m)
		}
		done <- ms
	}()
	err := c.Update(ctx, ch)
	close(ch)
	ms := <-done
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return ms
}
