package outbox

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestStuck(t *testing.T) {
	db, pool := setup(t, schema)
	long := strings.Repeat("é", 300)
	db.Exec(t, `INSERT INTO outbox (event_id, created_at, event_type, status, lease_until, attempts, last_error, published_at) VALUES
	  ('00000000-0000-0000-0000-000000000001', now() - interval '3 hours', 'a', 'PUBLISHED', NULL, 1, NULL, now()),
	  ('00000000-0000-0000-0000-000000000002', now() - interval '2 hours', 'a', 'CLAIMED', now() - interval '1 minute', 3, $1, NULL),
	  ('00000000-0000-0000-0000-000000000003', now() - interval '1 hour', 'b', 'PENDING', NULL, 0, NULL, NULL),
	  ('00000000-0000-0000-0000-000000000004', now() - interval '1 second', 'b', 'CLAIMED', now() + interval '1 hour', 1, 'x', NULL),
	  ('00000000-0000-0000-0000-000000000005', now() - interval '4 hours', 'a', 'ABANDONED', NULL, 9, NULL, NULL)`, long)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := Stuck(ctx, pool, "m", cfg(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want 2", rows)
	}
	r := rows[0]
	if r.ID != "00000000-0000-0000-0000-000000000002" || r.State != LeaseExpired || !r.UnknownResult || r.Attempts != 3 ||
		!r.PastDeadline || r.Labels["event_type"] != "a" {
		t.Errorf("first row %+v", r)
	}
	if utf8.RuneCountInString(r.LastError) != LastErrorChars || !utf8.ValidString(r.LastError) {
		t.Errorf("last_error %d runes", utf8.RuneCountInString(r.LastError))
	}
	if r.AgeSeconds < 7190 || r.AgeSeconds > 7300 {
		t.Errorf("age %v", r.AgeSeconds)
	}
	if rows[1].State != Pending || rows[1].ID != "00000000-0000-0000-0000-000000000003" {
		t.Errorf("second row %+v", rows[1])
	}
	all, err := Stuck(ctx, pool, "m", cfg(), 100)
	if err != nil || len(all) != 3 || all[2].State != InFlight || all[2].PastDeadline {
		t.Errorf("all rows %+v %v", all, err)
	}
	// A nullable label column: a NULL label value is a combination the
	// skip-scan visits like any other, merged in created_at order.
	db.Exec(t, `ALTER TABLE outbox ALTER COLUMN topic DROP NOT NULL;
	  INSERT INTO outbox (event_id, created_at, event_type, topic) VALUES
	  ('00000000-0000-0000-0000-000000000006', now() - interval '90 minutes', 'b', NULL),
	  ('00000000-0000-0000-0000-000000000007', now() - interval '30 minutes', 'a', 't')`)
	all, err = Stuck(ctx, pool, "m", cfg(), 3)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range all {
		ids = append(ids, r.ID[len(r.ID)-1:])
	}
	if strings.Join(ids, ",") != "2,6,3" {
		t.Errorf("oldest three = %v, want 2,6,3", ids)
	}
	if all[1].Labels["destination"] != "" || all[1].State != Pending {
		t.Errorf("NULL-label row %+v", all[1])
	}
}
