package audit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAuditIDMismatch: ids written in another case on the
// topics do not page as silent loss; the collector fails naming the
// mismatch and the missing gauge is withheld. A real loss, with the
// topics' recent ids still rows of the outbox, keeps paging.
func TestAuditIDMismatch(t *testing.T) {
	f := newFixture(t)
	now := time.Now().Truncate(time.Second)
	for i := 0; i < 40; i++ {
		id := newUUID()
		f.row(id, "PUBLISHED", now.Add(-10*time.Minute), ptrTime(now.Add(-9*time.Minute)))
		f.produce(rec("messages", int32(i%2), strings.ToUpper(id), now.Add(-9*time.Minute)))
	}
	a := f.startAudit(auditCfg("messages", "messages.retry"), func() time.Time { return now })
	r := compare(t, a)
	if r.IDMismatch == "" || !strings.Contains(r.IDMismatch, "upper case") {
		t.Fatalf("id mismatch %q, want one naming upper case; match %+v", r.IDMismatch, r.Match)
	}
	c := NewCollector(a)
	err := c.Update(context.Background(), make(chan prometheus.Metric, 20))
	if err == nil || !strings.Contains(err.Error(), "upper case") {
		t.Errorf("Update error %v, want one naming the mismatch", err)
	}
	if n, err := promtestutil.GatherAndCount(gatherer(t, c), "outbox_audit_missing_in_broker_events"); err != nil || n != 0 {
		t.Errorf("missing gauge exported %d times (err %v) during a mismatch, want withheld", n, err)
	}
	if n, _ := promtestutil.GatherAndCount(gatherer(t, c), "outbox_audit_window_seconds"); n != 1 {
		t.Errorf("window gauge exported %d times, want 1", n)
	}

	// A real loss: 40 more rows never published, while the topics keep
	// carrying ids of rows the outbox has.
	g := newFixture(t)
	for i := 0; i < 40; i++ {
		id := newUUID()
		g.row(id, "PUBLISHED", now.Add(-10*time.Minute), ptrTime(now.Add(-9*time.Minute)))
	}
	for i := 0; i < 10; i++ {
		id := newUUID()
		g.row(id, "PUBLISHED", now.Add(-8*time.Minute), ptrTime(now.Add(-7*time.Minute)))
		g.produce(rec("messages", 0, id, now.Add(-7*time.Minute)))
	}
	b := g.startAudit(auditCfg("messages", "messages.retry"), func() time.Time { return now })
	r = compare(t, b)
	if r.IDMismatch != "" || r.MissingCount != 40 {
		t.Errorf("real loss: mismatch %q, missing %d; want none, 40", r.IDMismatch, r.MissingCount)
	}
	if err := NewCollector(b).Update(context.Background(), make(chan prometheus.Metric, 20)); err != nil {
		t.Errorf("real loss: Update: %v", err)
	}
}

// newUUID returns a random version-4 UUID in its usual lower-case text.
func newUUID() string { return uuid.NewString() }

func gatherer(t *testing.T, c *Collector) prometheus.Gatherer {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(auditAdapter{c}); err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestDiagnose(t *testing.T) {
	u := "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
	for _, tt := range []struct {
		table, topic string
		norm         bool
		want         string
	}{
		{u, strings.ToUpper(u), true, "the topic's ids are upper case"},
		{strings.ToUpper(u), u, true, "the table's ids are upper case"},
		{u, `"` + u + `"`, true, "the topic's ids are quoted"},
		{u, strings.ReplaceAll(u, "-", ""), true, "the topic writes UUIDs without dashes"},
		{u, "{" + u + "}", true, "the topic's ids are in braces"},
		{u, " " + u, true, "white space"},
		{"42", "order-42", false, "no id is on both sides"},
	} {
		got := Diagnose([]string{tt.table}, []string{tt.topic}, tt.norm)
		if !strings.Contains(got, tt.want) || !strings.Contains(got, tt.table) {
			t.Errorf("Diagnose(%q, %q) = %q, want it to say %q and show the table's id", tt.table, tt.topic, got, tt.want)
		}
	}
	if implausible(matchStats{Judged: 19, Recent: 10}) || !implausible(matchStats{Judged: 20, Recent: 5}) ||
		implausible(matchStats{Judged: 100, Matched: 10, Recent: 10}) || implausible(matchStats{Judged: 100, Recent: 10, Found: 1}) {
		t.Error("implausible() thresholds are not as documented")
	}
}
