package outbox

import (
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestCappedCountsSeeEveryLabelSet: with counts capped, a 10-minute-old
// row of a label value that sorts after a big backlog, with an expired
// lease and attempts > 0, is still counted in its state, as an unknown
// result and past its deadline (it once read 0 in each).
func TestCappedCountsSeeEveryLabelSet(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic) SELECT now() - interval '1 second', 'a.busy', 't' FROM generate_series(1, 60);
	  INSERT INTO outbox (created_at, event_type, topic, status, lease_until, attempts) VALUES
	    (now() - interval '10 minutes', 'b.rare', 't', 'CLAIMED', now() - interval '1 minute', 2)`)
	o := obStatusOutbox()
	o.MaxCount = 5
	cols := []string{"outbox", "ob", "event_type", "b.rare", "destination", "t"}
	l := func(extra ...string) map[string]string {
		m := map[string]string{}
		for _, kv := range [][]string{cols, extra} {
			for i := 0; i+1 < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	c := NewCollector("ob", o, pool, testutil.Quiet())
	for name, want := range map[string]float64{
		"outbox_events{lease_expired}":      1,
		"outbox_unknown_result_events":      1,
		"outbox_past_deadline_events":       1,
		"outbox_oldest_pending_age_seconds": 600,
	} {
		var got float64
		if name == "outbox_events{lease_expired}" {
			got = seriesValue(t, c, "outbox_events", l("state", "lease_expired"))
		} else {
			got = seriesValue(t, c, name, l())
		}
		if got < want || got > want+30 {
			t.Errorf("%s{event_type=b.rare} = %v while capped, want %v", name, got, want)
		}
	}
	if v := seriesValue(t, c, "outbox_events", map[string]string{"outbox": "ob", "event_type": "a.busy", "destination": "t", "state": "pending"}); v < 1 || v > 60 {
		t.Errorf("a.busy pending = %v, want a lower bound in [1, 60]", v)
	}
	if v := seriesValue(t, c, "outbox_events_capped", map[string]string{"outbox": "ob"}); v != 1 {
		t.Errorf("capped = %v", v)
	}
}

// TestCappedCountsSeeNullLabelSets: TestCappedCountsSeeEveryLabelSet for
// NULL label values: while
// capped, a label set with a NULL value is a label set like any other
// (the skip-scan once passed NULLs over, so these read 0 and their
// oldest age came from whichever capped rows were read).
func TestCappedCountsSeeNullLabelSets(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	db.Exec(t, `ALTER TABLE outbox ALTER COLUMN event_type DROP NOT NULL;
	  INSERT INTO outbox (created_at, event_type, topic) SELECT now() - interval '1 second', 'a.busy', 't' FROM generate_series(1, 60);
	  INSERT INTO outbox (created_at, event_type, topic) SELECT now() - interval '1 second', NULL, 'u' FROM generate_series(1, 30);
	  INSERT INTO outbox (created_at, event_type, topic, status) SELECT now() - interval '1 second', 'a.busy', 't', 'ABANDONED' FROM generate_series(1, 20);
	  INSERT INTO outbox (created_at, event_type, topic, status, lease_until, attempts) VALUES
	    (now() - interval '10 minutes', NULL, 't', 'CLAIMED', now() - interval '1 minute', 2),
	    (now() - interval '20 minutes', NULL, NULL, 'PENDING', NULL, 0),
	    (now() - interval '1 second', 'b', NULL, 'ABANDONED', NULL, 0)`)
	o := obStatusOutbox()
	o.MaxCount = 5
	c := NewCollector("ob", o, pool, testutil.Quiet())
	l := func(et, dest string, extra ...string) map[string]string {
		m := map[string]string{"outbox": "ob", "event_type": et, "destination": dest}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	got := collect(t, c)
	for _, w := range []struct {
		name   string
		labels map[string]string
		lo, hi float64
	}{
		{"outbox_events", l("", "t", "state", "lease_expired"), 1, 1},
		{"outbox_unknown_result_events", l("", "t"), 1, 1},
		{"outbox_past_deadline_events", l("", "t"), 1, 1},
		{"outbox_oldest_pending_age_seconds", l("", "t"), 600, 630},
		{"outbox_events", l("", "", "state", "pending"), 1, 1},
		{"outbox_events", l("", "u", "state", "pending"), 1, 30},
		{"outbox_past_deadline_events", l("", ""), 1, 1},
		{"outbox_oldest_pending_age_seconds", l("", ""), 1200, 1230},
		{"outbox_events", l("b", "", "state", "dead"), 1, 1},
		{"outbox_events", l("a.busy", "t", "state", "dead"), 1, 20},
		{"outbox_events_capped", map[string]string{"outbox": "ob"}, 1, 1},
	} {
		v, ok := got[seriesKey(w.name, w.labels)]
		if !ok || v < w.lo || v > w.hi {
			t.Errorf("%s%v = %v (present %v) while capped, want %v to %v", w.name, w.labels, v, ok, w.lo, w.hi)
		}
	}
}

func TestOutboxCappedCountKeepsOldestExact(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type) SELECT now() - i * interval '1 second', CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END FROM generate_series(1, 40) i`)
	db.Exec(t, `CREATE INDEX ON outbox (event_type, created_at) WHERE status IN ('PENDING','CLAIMED','UNSURE')`)
	o := obStatusOutbox()
	o.MaxCount = 5
	for _, labels := range [][]config.Label{o.Labels[:1], nil} {
		o.Labels = labels
		ms := obScrape(t, NewCollector("m", o, pool, testutil.Quiet()))
		if v := obValue(t, ms, "outbox_events_capped", nil); v != 1 {
			t.Errorf("capped = %v, want 1", v)
		}
		var total float64
		for _, m := range ms {
			if strings.Contains(m.Desc().String(), `"outbox_events"`) {
				total += testutil.MetricValue(t, m)
			}
		}
		if total > 6 {
			t.Errorf("capped total %v, want at most max_count+1", total)
		}
		if labels != nil {
			obNear(t, "oldest even", obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "even"}), 40, 3)
			obNear(t, "oldest odd", obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "odd"}), 39, 3)
		} else {
			obNear(t, "oldest", obValue(t, ms, "outbox_oldest_pending_age_seconds", nil), 40, 3)
		}
	}
}
