package outbox

import (
	"fmt"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestLeaseReclaimedBetweenSamplesCounted: a lease
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

func TestOutboxLeaseExpiryCountedOnce(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	// Leases that expired before the exporter started are history, not
	// counted; those expiring afterwards are, once per (row, lease).
	db.Exec(t, `INSERT INTO outbox (id, event_type, status, lease_until, attempts) VALUES
	  (1, 'x', 'CLAIMED', now() + interval '1 second', 1), (2, 'x', 'CLAIMED', now() + interval '1 hour', 1),
	  (3, 'x', 'CLAIMED', now() - interval '1 hour', 1)`)
	c := NewCollector("m", obStatusOutbox(), pool, testutil.Quiet())
	steps := []struct {
		sql   string
		sleep time.Duration
		want  float64
	}{
		{"", 0, 0},
		{"", 1200 * time.Millisecond, 1}, // row 1's lease expired
		{"", 0, 1},                       // still the same expired lease
		// A lease that expired a moment ago but became visible only now.
		{"UPDATE outbox SET lease_until = now() - interval '500 milliseconds' WHERE id = 2", 0, 2},
		{"UPDATE outbox SET lease_until = now() + interval '1 hour' WHERE id = 1", 0, 2},        // reclaimed: live again
		{"UPDATE outbox SET lease_until = now() - interval '1 millisecond' WHERE id = 1", 0, 3}, // its new lease expired
		{"UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE id = 1", 0, 3},
		{"", 0, 3},
	}
	for i, s := range steps {
		if s.sql != "" {
			db.Exec(t, s.sql)
		}
		time.Sleep(s.sleep)
		if v := obValue(t, obScrape(t, c), "outbox_lease_expirations_total", nil); v != s.want {
			t.Errorf("step %d: lease expirations = %v, want %v", i, v, s.want)
		}
	}
}
