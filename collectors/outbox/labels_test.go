package outbox

import (
	"fmt"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestSeriesCapBoundsCombinations: three labels at
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

func TestOutboxLabelCapAndDeadlines(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	// Rows per type: a 4, b 3, c 2, d 1. a and c have deadline overrides,
	// so they always keep their series and their deadline (c once folded
	// into other and was judged against 300 s); the two
	// slots go to b and d, and nothing folds.
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic)
	  SELECT now() - interval '2 minutes', t, 'x' FROM unnest(array['a','a','a','a','b','b','b','c','c','d']) t`)
	o := obStatusOutbox()
	o.Labels = o.Labels[:1]
	o.MaxLabelValues = 2
	o.Deadlines = map[string]time.Duration{"a": time.Minute, "c": time.Minute}
	c := NewCollector("m", o, pool, testutil.Quiet())
	obScrape(t, c)
	// A fifth type arrives: no slot is free, so it folds into other, with
	// the default deadline.
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic) VALUES (now() - interval '10 minutes', 'e', 'x')`)
	ms := obScrape(t, c)
	obCompare(t, ms, `
# HELP outbox_past_deadline_events Unpublished rows older than their deadline. A lower bound while outbox_events_capped is 1.
# TYPE outbox_past_deadline_events gauge
outbox_past_deadline_events{event_type="a",outbox="m"} 4
outbox_past_deadline_events{event_type="b",outbox="m"} 0
outbox_past_deadline_events{event_type="c",outbox="m"} 2
outbox_past_deadline_events{event_type="d",outbox="m"} 0
outbox_past_deadline_events{event_type="other",outbox="m"} 1
# HELP outbox_deadline_seconds The configured notification deadline of these events in seconds.
# TYPE outbox_deadline_seconds gauge
outbox_deadline_seconds{event_type="a",outbox="m"} 60
outbox_deadline_seconds{event_type="b",outbox="m"} 300
outbox_deadline_seconds{event_type="c",outbox="m"} 60
outbox_deadline_seconds{event_type="d",outbox="m"} 300
outbox_deadline_seconds{event_type="other",outbox="m"} 300
`, "outbox_past_deadline_events", "outbox_deadline_seconds")
}
