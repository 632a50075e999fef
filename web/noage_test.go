package web

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/web/history"
)

// An outbox whose table keeps no creation time exports no age and no
// deadline: the page says so instead of showing 0s, which would read as
// healthy; an outbox with an age shows it, and a failed collection is
// not taken for a table without a creation time.
func TestPageOutboxWithoutCreationTime(t *testing.T) {
	snap := &Snapshot{Metrics: map[string][]Sample{
		"outbox_deadline_seconds":           {{Labels: map[string]string{"outbox": "timed"}, Value: 300}},
		"outbox_oldest_pending_age_seconds": {{Labels: map[string]string{"outbox": "timed"}, Value: 42}},
		"outbox_events": {
			{Labels: map[string]string{"outbox": "timed", "state": "pending"}, Value: 1},
			{Labels: map[string]string{"outbox": "untimed", "state": "pending"}, Value: 4},
		},
		"outbox_exporter_collector_success": {
			{Labels: map[string]string{"collector": "outbox", "target": "timed"}, Value: 1},
			{Labels: map[string]string{"collector": "outbox", "target": "untimed"}, Value: 1},
			{Labels: map[string]string{"collector": "outbox", "target": "failing"}, Value: 0},
		},
	}}
	ok := map[string]bool{"outbox/timed": true, "outbox/untimed": true}
	s := &Server{rec: &recorder{history: history.New(time.Hour, time.Minute, 10)}}
	views := s.outboxViews(nil, snap, ok, time.Now())
	got := map[string]bool{}
	for _, v := range views {
		got[v.Name] = v.NoAge
	}
	if want := map[string]bool{"timed": false, "untimed": true, "failing": false}; len(got) != 3 || got["timed"] || !got["untimed"] || got["failing"] {
		t.Fatalf("NoAge by outbox %v, want %v", got, want)
	}
	for i := range views {
		if views[i].Name == "untimed" {
			views[i].Stuck = []StuckView{{ID: "m1", State: "pending", AgeUnknown: true}}
		}
	}
	var b strings.Builder
	if err := pageTmpl.Execute(&b, pageData{HaveData: true, Outboxes: views}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if i := strings.Index(page, "<code>m1</code>"); i < 0 || !strings.Contains(page[i:], ">unknown<") {
		t.Errorf("the stuck row of unknown age does not say so:\n%s", page)
	}
	row := page[strings.Index(page, `data-outbox="untimed"`):]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, "no creation time") || strings.Contains(row, ">0s<") {
		t.Errorf("the untimed outbox's row does not say it has no age:\n%s", row)
	}
}
