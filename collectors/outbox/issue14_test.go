package outbox

import (
	"fmt"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// seriesValue returns the value of series name{labels} in ms, -1 if absent.
func seriesValue(t *testing.T, c *Collector, name string, labels map[string]string) float64 {
	t.Helper()
	for k, v := range collect(t, c) {
		if k == seriesKey(name, labels) {
			return v
		}
	}
	return -1
}

// TestCappedCountsSeeEveryLabelSet is issue 14, item 2 as reproduced: with
// counts capped, a 10-minute-old row of a label value that sorts after a
// big backlog, with an expired lease and attempts > 0, read 0 in every
// state, 0 unknown results and 0 past deadline.
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

// TestLeaseReclaimedBetweenSamplesCounted is issue 14, item 3: a lease
// that expires and is taken over by another relay (or published late by
// its holder) between two samples is counted once. The fake clock of the
// oracle makes the lease expire without waiting.
func TestLeaseReclaimedBetweenSamplesCounted(t *testing.T) {
	env := newOracleEnv(t)
	env.db.Exec(t, `CREATE TABLE public.ev (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, status text NOT NULL,
	  published_at timestamptz, claimed_at timestamptz, attempts int NOT NULL DEFAULT 0)`)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) string { return t0.Add(time.Duration(s) * time.Second).Format(time.RFC3339) }
	set := func(sql string) {
		env.db.Exec(t, sql)
	}
	set(fmt.Sprintf(`UPDATE fakeclock.clock SET t = '%s';
	  INSERT INTO public.ev VALUES (1, '%s', 'CLAIMED', NULL, '%s', 1), (2, '%s', 'CLAIMED', NULL, '%s', 1), (3, '%s', 'CLAIMED', NULL, '%s', 1)`,
		at(0), at(-20), at(-10), at(-20), at(-10), at(-20), at(-5)))
	ev := cfgEvOutbox()
	o := obDefaults(&ev)
	c := NewCollector("ob", o, env.pool, testutil.Quiet())
	key := map[string]string{"outbox": "ob"}
	if v := seriesValue(t, c, "outbox_lease_expirations_total", key); v != 0 {
		t.Fatalf("first sample: %v", v)
	}
	// Leases run out at +20 s (rows 1, 2) and +25 s (row 3). Row 1 is
	// reclaimed at +21 s (its holder died), row 2 published late at +22 s
	// by its holder, row 3 published in time at +24 s.
	set(fmt.Sprintf(`UPDATE fakeclock.clock SET t = '%s';
	  UPDATE public.ev SET claimed_at = '%s', attempts = 2 WHERE id = 1;
	  UPDATE public.ev SET status = 'PUBLISHED', published_at = '%s' WHERE id = 2;
	  UPDATE public.ev SET status = 'PUBLISHED', published_at = '%s' WHERE id = 3`, at(28), at(21), at(22), at(24)))
	if v := seriesValue(t, c, "outbox_lease_expirations_total", key); v != 2 {
		t.Fatalf("after a reclaim and a late publish: %v, want 2", v)
	}
	set(fmt.Sprintf(`UPDATE fakeclock.clock SET t = '%s'`, at(40)))
	if v := seriesValue(t, c, "outbox_lease_expirations_total", key); v != 2 {
		t.Fatalf("counted again: %v", v)
	}
}

func cfgEvOutbox() (o config.Outbox) {
	o.Table, o.ID, o.CreatedAt = "public.ev", "id", "created_at"
	o.Status, o.Pending, o.InFlight, o.Published = "status", []string{"PENDING"}, []string{"CLAIMED"}, []string{"PUBLISHED"}
	o.PublishedAt, o.ClaimedAt, o.LeaseTTL, o.Attempts = "published_at", "claimed_at", 30*time.Second, "attempts"
	return o
}

// TestSeriesCapBoundsCombinations is issue 14, item 8: three labels at
// max_label_values each must not allow max³ series; and values with a
// deadline override keep theirs.
func TestSeriesCapBoundsCombinations(t *testing.T) {
	c := NewSeriesCap(3, 4, []string{"paid"})
	var combos []Combo
	for i := 0; i < 10; i++ {
		for j := 0; j < 10; j++ {
			for k := 0; k < 10; k++ {
				combos = append(combos, Combo{Values: []string{fmt.Sprint("a", i), fmt.Sprint("b", j), fmt.Sprint("c", k)}, Rows: int64(i + j + k)})
			}
		}
	}
	combos = append(combos, Combo{Values: []string{"paid", "b0", "c0"}, Rows: 1}, Combo{Values: []string{"paid", "b9", "c9"}, Rows: 1})
	now := time.Unix(1_700_000_000, 0)
	c.Admit(combos, now)
	series := map[string]bool{}
	for _, x := range combos {
		f := c.Fold(x.Values)
		series[joinLabels(f)] = true
		if x.Values[0] == "paid" && f[0] != "paid" {
			t.Errorf("%v folded into %v: it has a deadline override", x.Values, f)
		}
	}
	if len(series) > 4+1+1 {
		t.Errorf("%d series from 1002 combinations, want at most 6: %v", len(series), series)
	}
	t.Logf("%d series", len(series))
}

// TestCappedCountsSeeNullLabelSets is item 2 for NULL label values: while
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
