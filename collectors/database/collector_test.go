package database

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster/pgclustertest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// collect runs c once and returns its two gauges.
func collect(t *testing.T, c *Collector) (inRecovery, lag float64) {
	t.Helper()
	ch := make(chan prometheus.Metric, 4)
	if err := c.Update(context.Background(), ch); err != nil {
		t.Fatalf("collect %s: %v", c.name, err)
	}
	close(ch)
	inRecovery, lag = -1, -1
	for m := range ch {
		switch {
		case testutil.IsMetric(m, "outbox_database_in_recovery"):
			inRecovery = testutil.MetricValue(t, m)
		case testutil.IsMetric(m, "outbox_database_replay_lag_seconds"):
			lag = testutil.MetricValue(t, m)
		}
		if l := testutil.LabelOf(t, m, "database"); l != c.name {
			t.Errorf("database label %q, want %q", l, c.name)
		}
	}
	return inRecovery, lag
}

// waitFor polls cond until it holds or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestStandbyReplayLag runs the collector on a throwaway primary and a
// real streaming replica of it (pg_basebackup -R), with replay paused
// while the primary commits, then resumed. The lag is judged against
// bounds read from the wall clock around the primary's commits: at least
// the time since the newest commit the standby has received but not
// replayed, at most the time since the test began the last commit the
// standby replayed before the pause.
func TestStandbyReplayLag(t *testing.T) {
	primary := pgclustertest.Start(t, "a primary", func(ctx context.Context) (*pgcluster.Cluster, error) {
		return pgcluster.Start(ctx, pgcluster.Options{})
	})
	standby := primary.StartStandby(t)
	pc := NewCollector("main", primary.ReadOnly(t, "postgres", 5*time.Second))
	sc := NewCollector("replica", standby.ReadOnly(t, "postgres", 5*time.Second))
	ctx := context.Background()
	exec := func(c *pgclustertest.Cluster, sql string) {
		t.Helper()
		if _, err := c.Admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if rec, lag := collect(t, pc); rec != 0 || lag != 0 {
		t.Fatalf("primary: in_recovery %v, replay lag %v; want 0, 0", rec, lag)
	}
	exec(primary, `CREATE TABLE t (id int)`)
	c1 := time.Now()
	exec(primary, `INSERT INTO t VALUES (1)`)
	rows := func() int {
		var n int
		if err := standby.Admin.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	waitFor(t, "the standby to replay the first row", func() bool { return rows() == 1 })
	waitFor(t, "the standby to report no lag", func() bool {
		rec, lag := collect(t, sc)
		return rec == 1 && lag == 0
	})

	exec(standby, `SELECT pg_wal_replay_pause()`)
	exec(primary, `INSERT INTO t VALUES (2)`)
	c2 := time.Now()
	received := func() bool {
		var behind bool
		err := standby.Admin.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()`).Scan(&behind)
		return err == nil && behind
	}
	waitFor(t, "the paused standby to receive the second row", received)
	before := time.Now()
	rec, lag := collect(t, sc)
	after := time.Now()
	if rec != 1 || lag <= 0 || lag < before.Sub(c2).Seconds() || lag > after.Sub(c1).Seconds() {
		t.Fatalf("paused standby: in_recovery %v, replay lag %v s; want 1 and a lag in [%v, %v]",
			rec, lag, before.Sub(c2).Seconds(), after.Sub(c1).Seconds())
	}
	if n := rows(); n != 1 {
		t.Fatalf("the paused standby shows %d rows, want 1 (the test did not pause replay)", n)
	}
	st, err := Read(ctx, standby.Admin)
	if err != nil || !st.Paused {
		t.Fatalf("state of the paused standby: %+v, %v", st, err)
	}

	exec(standby, `SELECT pg_wal_replay_resume()`)
	waitFor(t, "the resumed standby to replay the second row", func() bool { return rows() == 2 })
	waitFor(t, "the resumed standby to report no lag", func() bool {
		rec, lag := collect(t, sc)
		return rec == 1 && lag == 0
	})
}

// TestReplayLag: the lag's decisions, without a server.
func TestReplayLag(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := now.Add(-40 * time.Second)
	started := now.Add(-time.Hour)
	for _, c := range []struct {
		name string
		st   State
		want time.Duration
	}{
		{"primary", State{Now: now, StartedAt: started, ReplayedAt: &at}, 0},
		{"caught up", State{InRecovery: true, CaughtUp: true, Now: now, StartedAt: started, ReplayedAt: &at}, 0},
		{"behind", State{InRecovery: true, Now: now, StartedAt: started, ReplayedAt: &at}, 40 * time.Second},
		{"nothing replayed since start", State{InRecovery: true, Now: now, StartedAt: started}, time.Hour},
		{"clock skew", State{InRecovery: true, Now: now, StartedAt: started, ReplayedAt: ptr(now.Add(time.Second))}, 0},
	} {
		if got := c.st.ReplayLag(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func ptr(t time.Time) *time.Time { return &t }
