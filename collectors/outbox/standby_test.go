package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster/pgclustertest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestStandbyReplayPaused reads an outbox from a real streaming replica
// (pg_basebackup -R from a throwaway primary) whose replay is paused
// while the primary publishes 3 rows and writes 2 new ones. While paused,
// the 3 rows (pending as of the standby's replay) must not age past
// their deadline with the pause; once replay resumes, more than
// SkewWindow after their published_at, the 3 publications must be
// counted. (Ages were judged at now(), so the paused rows read 3 past
// their deadline, and the counter stayed at 0 for them.)
func TestStandbyReplayPaused(t *testing.T) {
	primary := pgclustertest.Start(t, "a primary", func(ctx context.Context) (*pgcluster.Cluster, error) {
		return pgcluster.Start(ctx, pgcluster.Options{})
	})
	ctx := context.Background()
	exec := func(c *pgclustertest.Cluster, sql string) {
		t.Helper()
		if _, err := c.Admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(primary, obStatusSchema)
	exec(primary, `INSERT INTO outbox (event_type, topic) SELECT 'x', 't' FROM generate_series(1, 3)`)
	standby := primary.StartStandby(t)
	count := func(where string) int {
		var n int
		if err := standby.Admin.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE `+where).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("the standby to show the 3 rows", func() bool { return count("true") == 3 })

	o := obStatusOutbox()
	o.Deadline = 20 * time.Second
	c := NewCollector("ob", o, standby.ReadOnly(t, "postgres", 10*time.Second), testutil.Quiet())
	x := map[string]string{"outbox": "ob", "event_type": "x", "destination": "t"}
	ms := scrapeMany(t, c) // starts the published watermark
	if v := obValue(t, ms, "outbox_published_events_total", x); v != 0 {
		t.Fatalf("published before anything was published: %v", v)
	}

	exec(standby, `SELECT pg_wal_replay_pause()`)
	exec(primary, `UPDATE outbox SET status = 'PUBLISHED', published_at = now()`)
	published := time.Now()
	exec(primary, `INSERT INTO outbox (event_type, topic) SELECT 'x', 't' FROM generate_series(1, 2)`)
	waitFor("the paused standby to receive the primary's changes", func() bool {
		var behind bool
		err := standby.Admin.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()`).Scan(&behind)
		return err == nil && behind
	})
	// Past the skew the published counters tolerate, and past the rows'
	// deadline had they been aged at now().
	waitFor("the skew window to pass", func() bool { return time.Since(published) > outboxsql.SkewWindow+2*time.Second })
	if n := count("status = 'PENDING'"); n != 3 {
		t.Fatalf("the paused standby shows %d pending rows, want 3 (replay was not paused)", n)
	}
	ms = scrapeMany(t, c)
	if v := obValue(t, ms, "outbox_past_deadline_events", x); v != 0 {
		t.Errorf("while replay is paused: %v rows past their 20 s deadline, want 0 (they were not, as of the replayed time)", v)
	}
	if v := obValue(t, ms, "outbox_oldest_pending_age_seconds", x); v >= o.Deadline.Seconds() {
		t.Errorf("while replay is paused: oldest age %v s, want it judged at the replayed time (under 20 s)", v)
	}

	exec(standby, `SELECT pg_wal_replay_resume()`)
	waitFor("the resumed standby to replay", func() bool { return count("status = 'PUBLISHED'") == 3 && count("true") == 5 })
	waitFor("the standby to catch up", func() bool {
		var caught bool
		err := standby.Admin.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn()`).Scan(&caught)
		return err == nil && caught
	})
	ms = scrapeMany(t, c)
	if v := obValue(t, ms, "outbox_published_events_total", x); v != 3 {
		t.Errorf("after replay resumed: published %v, want 3 (rows visible more than %v after their published_at)", v, outboxsql.SkewWindow)
	}
	if v := obValue(t, ms, "outbox_events", map[string]string{"event_type": "x", "state": "pending"}); v != 2 {
		t.Errorf("after replay resumed: %v pending, want the 2 new rows", v)
	}
}
