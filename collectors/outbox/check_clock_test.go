package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// TestCheckClock: check fails naming the column when a writer stores UTC
// in `timestamp without time zone` columns and the server's TimeZone is
// another (every age would be hours off, and published rows would never
// be counted), and when the newest value lies in the future; it passes
// once time_zone says how the values are written.
func TestCheckClock(t *testing.T) {
	db, _ := setup(t, `CREATE TABLE sbmt (id bigint PRIMARY KEY, created_at timestamp NOT NULL, published_at timestamp);
INSERT INTO sbmt VALUES (1, now() AT TIME ZONE 'UTC' - interval '10 minutes', NULL), (2, now() AT TIME ZONE 'UTC' - interval '20 minutes', now() AT TIME ZONE 'UTC' - interval '5 minutes');
CREATE TABLE ahead (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
INSERT INTO ahead VALUES (1, now() + interval '3 hours'), (2, now() - interval '1 minute');`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	moscow, err := pg.Open(ctx, &config.Database{DSN: config.Secret(db.URL + "&timezone=Europe/Moscow"), MaxConnections: 1,
		StatementTimeout: 10 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer moscow.Close()
	sbmt := func(zone string) *config.Outbox {
		return &config.Outbox{Table: "sbmt", ID: "id", CreatedAt: "created_at", PublishedAt: "published_at", TimeZone: zone,
			Deadline: time.Minute, MaxLabelValues: 10, MaxCount: 10}
	}
	for _, tc := range []struct {
		name string
		o    *config.Outbox
		want []string
		fail bool
	}{
		{"utc in moscow", sbmt(""), []string{"FAIL clock created_at = created_at: the newest value is 3h", "set time_zone: UTC", "FAIL clock published_at = published_at"}, true},
		{"utc said", sbmt("UTC"), []string{"ok   clock created_at = created_at", "ok   clock published_at = published_at"}, false},
		{"future", &config.Outbox{Table: "ahead", ID: "id", CreatedAt: "created_at", Deadline: time.Minute, MaxLabelValues: 10, MaxCount: 10},
			[]string{"FAIL clock created_at = created_at: the newest value lies 3h0m", "3 whole hours"}, true},
	} {
		r := check(t, moscow, "events", tc.o)
		text := r.Text()
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: report lacks %q:\n%s", tc.name, w, text)
			}
		}
		if tc.fail && r.OK {
			t.Errorf("%s: check passed", tc.name)
		}
	}
}
