package libraries

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
)

// TestCheckNamesPresetAndGeneration: check says which preset and schema
// generation a library's table matched; on a table that matches none it
// names the columns missing and the closest preset.
func TestCheckNamesPresetAndGeneration(t *testing.T) {
	for _, tc := range []struct {
		fixture, alter, preset string
		ok                     bool
		want                   string
	}{
		{"spring-modulith-1.sql", "", "spring-modulith", true, "ok   preset spring-modulith: schema 1.x"},
		{"spring-modulith-2.sql", "", "spring-modulith", true, "ok   preset spring-modulith: schema 2.x"},
		{"namastack.sql", "", "namastack", true, "ok   preset namastack: schema 1.x"},
		{"debezium-outbox.sql", "", "debezium-outbox", true, "ok   preset debezium-outbox: schema 3.x"},
		{"nservicebus.sql", "", "nservicebus", true, "ok   created_at: no creation time: rows are counted by state, but the age"},
		{"spring-modulith-1.sql", "ALTER TABLE event_publication DROP COLUMN completion_date", "spring-modulith", false,
			"FAIL preset spring-modulith: the table matches no schema of it: schema 1.x lacks completion_date (closest: spring-modulith 1.x, lacking completion_date)"},
		// Epoch milliseconds three hours ahead of the clock (2030-01-01).
		{"eventuate-tram.sql", "INSERT INTO message (id, destination, headers, payload, creation_time) VALUES ('m1', 'orders', '{}', '{}', 1893466800000)", "eventuate-tram", false,
			"FAIL clock created_at = creation_time: the newest value lies 3h0m0s in the future (3 whole hours"},
		{"namastack.sql", "ALTER TABLE outbox_record RENAME TO event_publication", "spring-modulith", false,
			"lacks publication_date, completion_date, listener_id (closest: namastack 1.x)"},
	} {
		rg := newRig(t, tc.fixture)
		if tc.alter != "" {
			rg.db.Exec(t, tc.alter)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r, err := outbox.Check(ctx, rg.pool, "events", outboxFor(t, tc.preset, ""))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		// A matched table still lacks the indexes check asks for: only a
		// table that matches no schema must fail by its preset item.
		if text := r.Text(); (!tc.ok && r.OK) || !strings.Contains(text, tc.want) {
			t.Errorf("%s %s: check OK %v, want %q:\n%s", tc.fixture, tc.alter, r.OK, tc.want, text)
		}
	}
}
