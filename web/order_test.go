package web

import (
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// A row overtaken by a published later row of its aggregate is in the
// stuck-rows API and on the page with the sequence that overtook it.
func TestStuckRowsShowOutOfOrder(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (
	event_id text PRIMARY KEY, event_type text NOT NULL, status text NOT NULL,
	created_at timestamptz NOT NULL, published_at timestamptz, lease_until timestamptz,
	attempts int NOT NULL DEFAULT 0, last_error text, conversation_id text NOT NULL, seq int8 NOT NULL);
INSERT INTO outbox VALUES
 ('e9',  'message.sent', 'CLAIMED',   now() - interval '1 min', NULL, now() + interval '1 min', 1, NULL, 'conv-1', 9),
 ('e10', 'message.sent', 'PUBLISHED', now() - interval '50 s', now() - interval '40 s', NULL, 1, NULL, 'conv-1', 10),
 ('x1',  'message.sent', 'PENDING',   now() - interval '5 s', NULL, NULL, 0, NULL, 'conv-2', 1)`)
	cfg := strings.Replace(reliabilityConfig(db.URL, 2), "    deadline: 5m", "    deadline: 5m\n    aggregate: conversation_id\n    sequence: seq", 1)
	h := startOn(t, cfg).Handler()
	code, body := get(t, h, "GET", "/api/v1/stuck?outbox=messages&limit=5")
	flat := strings.Join(strings.Fields(body), "")
	if code != 200 || !strings.Contains(flat, `"out_of_order":{"aggregate":"conv-1","sequence":"9","overtaken_by":"10"}`) ||
		strings.Count(flat, `"out_of_order"`) != 1 {
		t.Errorf("stuck API %d: %s", code, body)
	}
	scrapeWith(h, "") // the page shows the last scrape's outboxes
	code, body = get(t, h, "GET", "/")
	if code != 200 || !strings.Contains(body, "out of order: aggregate conv-1: sequence 9 overtaken by 10") {
		t.Errorf("page %d does not show the overtaken row:\n%s", code, body)
	}
}
