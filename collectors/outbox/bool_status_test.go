package outbox

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// TestBooleanStatus: a boolean published or dispatched flag is a status
// column whose values are true and false (written as YAML reads them:
// false, False, f, 0...), and check accepts its type.
func TestBooleanStatus(t *testing.T) {
	_, pool := setup(t, `CREATE TABLE flags (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, dispatched boolean);
INSERT INTO flags SELECT g, now() - g * interval '1 minute', g % 3 = 0 FROM generate_series(1, 10) g;
INSERT INTO flags VALUES (11, now(), NULL)`)
	o := &config.Outbox{Table: "flags", ID: "id", CreatedAt: "created_at", Status: "dispatched",
		Pending: []string{"False"}, Published: []string{"t"}, NullStatus: "pending",
		Deadline: time.Hour, MaxLabelValues: 10, MaxCount: 100}
	r := check(t, pool, "flags", o)
	if !strings.Contains(r.Text(), "ok   column status = dispatched: bool") {
		t.Errorf("check refused the boolean status:\n%s", r.Text())
	}
	m := collect(t, NewCollector("flags", o, pool, slog.New(slog.DiscardHandler)))
	// Rows 1..10: 3, 6 and 9 dispatched; 7 waiting, plus the NULL one.
	if got := m[`outbox_events{outbox="flags",state="pending"}`]; got != 8 {
		t.Errorf("pending %v, want 8: %v", got, m)
	}
	if got := m[`outbox_unclassified_events{outbox="flags"}`]; got != 0 {
		t.Errorf("unclassified %v, want 0", got)
	}
	o.Pending = []string{"nope"}
	if r := check(t, pool, "flags", o); r.OK || !strings.Contains(r.Text(), `status value "nope" is not true or false`) {
		t.Errorf("a value that is not a boolean passed:\n%s", r.Text())
	}
}
