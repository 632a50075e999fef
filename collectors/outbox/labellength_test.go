package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestLongLabelValuesCut: a 1 MB label value (and a second one sharing
// its first megabyte) is cut at max_label_length, with the marker, in
// every metric and in the stuck rows; the two stay two series; short
// values are whole. (Each scrape once carried the whole megabyte on
// every series of the label set.)
func TestLongLabelValuesCut(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	huge := strings.Repeat("p", 1<<20)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic) VALUES
	    (now() - interval '10 minutes', $1 || 'A', 't'),
	    (now() - interval '9 minutes', $1 || 'B', 't'),
	    (now() - interval '1 minute', 'order.paid', 't')`, huge)
	o := obStatusOutbox()
	o.MaxLabelLength = 64
	c := NewCollector("ob", o, pool, testutil.Quiet())
	ms := scrapeMany(t, c)
	long := map[string]bool{}
	size := 0
	for _, m := range ms {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.Label {
			size += len(l.GetValue())
			if len(l.GetValue()) > 64 {
				t.Fatalf("%s: label %s is %d bytes, want at most 64", m.Desc(), l.GetName(), len(l.GetValue()))
			}
			if strings.HasPrefix(l.GetValue(), "ppp") {
				if !strings.Contains(l.GetValue(), "…[cut ") {
					t.Errorf("a cut value without the marker: %q", l.GetValue())
				}
				long[l.GetValue()] = true
			}
		}
	}
	if len(long) != 2 {
		t.Errorf("the two long values show as %d label values, want 2 distinct cut values: %v", len(long), long)
	}
	if size > 64<<10 {
		t.Errorf("label values total %d bytes in one scrape", size)
	}
	if v := obValue(t, ms, "outbox_events", map[string]string{"event_type": "order.paid", "state": "pending"}); v != 1 {
		t.Errorf("order.paid pending %v, want 1 (a short value is whole)", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := Stuck(ctx, pool, "ob", o, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("stuck rows %d, want 3", len(rows))
	}
	for _, r := range rows[:2] {
		if v := r.Labels["event_type"]; len(v) > 64 || !strings.Contains(v, "…[cut ") {
			t.Errorf("stuck row's event_type %d bytes %.80q, want at most 64 with the marker", len(v), v)
		}
	}
	if rows[0].Labels["event_type"] == rows[1].Labels["event_type"] {
		t.Error("two different long values look alike in the stuck rows")
	}
	if rows[2].Labels["event_type"] != "order.paid" {
		t.Errorf("short value in the stuck rows: %q", rows[2].Labels["event_type"])
	}
}

// TestCheckStatesIndexedLabelLimit: check says the limit its indexes put
// on the writer's label values, and the limit is real: once the indexes
// exist, an INSERT with a 12 kB label value fails with PostgreSQL's
// "index row requires" error.
func TestCheckStatesIndexedLabelLimit(t *testing.T) {
	db, pool := setup(t, schema)
	r := check(t, pool, "m", cfg())
	note := strings.Join(r.Notes, "\n")
	if !strings.Contains(note, "label columns event_type, topic") || !strings.Contains(note, "index row requires") {
		t.Fatalf("check's notes do not state the indexed label limit:\n%s", note)
	}
	for _, s := range r.Statements {
		db.Exec(t, s)
	}
	_, err := db.Admin.Exec(context.Background(), `INSERT INTO outbox (event_type)
	    SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g`)
	if err == nil || !strings.Contains(err.Error(), "index row requires") {
		t.Fatalf("an INSERT with a 12 kB label value under the indexes check asks for: %v, want the index row limit", err)
	}
}
