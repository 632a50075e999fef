package leader

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// counted is a Session that counts the statements sent on it.
type counted struct {
	Session
	mu           sync.Mutex
	tries, waits int
}

func (c *counted) TryLock(ctx context.Context, keys []int64) ([]Try, error) {
	c.mu.Lock()
	c.tries++
	c.mu.Unlock()
	return c.Session.TryLock(ctx, keys)
}

func (c *counted) Wait(ctx context.Context, key int64, wait time.Duration) (bool, error) {
	c.mu.Lock()
	c.waits++
	c.mu.Unlock()
	return c.Session.Wait(ctx, key, wait)
}

// End passes a try's open transaction on to its end (pgSession.End).
func (c *counted) End(ctx context.Context) error {
	if s, ok := c.Session.(ender); ok {
		return s.End(ctx)
	}
	return nil
}

func (c *counted) statements() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tries + c.waits
}

// A standby waits for the leader's lock in one statement at a time: it
// sends at most two statements per Wait (a try and a wait), not one per
// Retry, and it takes the lock the moment the server ends the leader's
// session, by its wait.
func TestStandbyWaitsForTheLock(t *testing.T) {
	db := pgtest.New(t)
	dbc := roleDB(t, db)
	// A wait outlasts the session's statement_timeout: it sets its own.
	dbc.StatementTimeout = time.Second
	tm := fast
	tm.Wait = 2 * time.Second
	a := New(tasks, PGDialer(dbc, "a:9187", tm, nil), tm, testutil.Quiet())
	start(t, a)
	waitUntil(t, "a leads every task", func() bool { return len(leaders(map[string]*Elector{"a": a})) == len(tasks) })

	var log testutil.SyncBuffer
	var sess *counted
	var mu sync.Mutex
	// b reaches the server through a counter of its transactions.
	wire := pgtest.NewWire(t)
	bdb := *dbc
	bdb.DSN = config.Secret(wire.URL(t, dbc.DSN.Reveal()))
	dial := PGDialer(&bdb, "b:9187", tm, nil)
	b := New(tasks, func(ctx context.Context) (Session, error) {
		s, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		sess = &counted{Session: s}
		return sess, nil
	}, tm, slog.New(slog.NewTextHandler(&log, nil)))
	began := time.Now()
	start(t, b)
	waitUntil(t, "b names the leader", func() bool { return b.Status()[0].Leader == "a:9187" })
	// Three waits and a part: a standby that tried every Retry would
	// have sent some 70 statements by then.
	waitUntil(t, "b stands by for three waits", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return sess != nil && sess.statements() >= 7
	})
	mu.Lock()
	n, span, waits := sess.statements(), time.Since(began), sess.waits
	mu.Unlock()
	xacts := wire.Transactions()
	if most := 2*int(span/tm.Wait) + 2; n > most {
		t.Errorf("the standby sent %d statements in %v, more than %d (two per wait of %v)", n, span, most, tm.Wait)
	}
	// Each try that a wait follows shares its transaction: one per
	// wait, and the first try's (before b knew whom to wait for).
	if xacts > int64(waits)+2 {
		t.Errorf("the standby's session ended %d transactions on the wire for %d waits, want at most %d (one per wait)", xacts, waits, waits+2)
	}

	db.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", AppName("a:9187"))
	waitUntil(t, "b leads every task", func() bool { return len(leaders(map[string]*Elector{"b": b})) == len(tasks) })
	if strings.Contains(log.String(), "lost") {
		t.Errorf("the standby lost its session:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "lease taken after waiting for it") {
		t.Errorf("the standby took no lease by waiting for it:\n%s", log.String())
	}
}

// A standby's wait holds a snapshot (its backend_xmin, in
// pg_stat_activity) for as long as it waits, which holds back VACUUM's
// horizon on the leases' database: so the wait is bounded (StandbyWait)
// and each wait statement holds it no longer than Wait.
func TestStandbyWaitHoldsASnapshotNoLongerThanTheWait(t *testing.T) {
	db := pgtest.New(t)
	dbc := roleDB(t, db)
	tm := fast
	tm.Wait = 2 * time.Second
	a := New(tasks, PGDialer(dbc, "a:9187", tm, nil), tm, testutil.Quiet())
	start(t, a)
	waitUntil(t, "a leads every task", func() bool { return len(leaders(map[string]*Elector{"a": a})) == len(tasks) })
	b := New(tasks, PGDialer(dbc, "b:9187", tm, nil), tm, testutil.Quiet())
	start(t, b)

	ctx := context.Background()
	var longest float64
	waits := map[time.Time]bool{} // by the wait statement's start
	waitUntil(t, "three waits of the standby seen", func() bool {
		var xmin bool
		var state, event string
		var since time.Time
		var age float64
		err := db.Admin.QueryRow(ctx, `SELECT backend_xmin IS NOT NULL, coalesce(state, ''), coalesce(wait_event_type, ''),
			query_start, extract(epoch from clock_timestamp() - query_start)::float8
			FROM pg_stat_activity WHERE application_name = $1`, AppName("b:9187")).Scan(&xmin, &state, &event, &since, &age)
		if err != nil {
			return false // no session yet
		}
		if state == "active" && event == "Lock" {
			if !xmin {
				t.Errorf("the standby's wait holds no snapshot: the wait could be longer (StandbyWait)")
			}
			waits[since] = true
			longest = max(longest, age)
		}
		return len(waits) >= 3
	})
	t.Logf("%d waits, the longest held its snapshot %.2fs", len(waits), longest)
	// The server ends the wait at Wait (lock_timeout); the margin is
	// for the server's and this sampler's scheduling.
	if most := (tm.Wait + tm.Wait/2).Seconds(); longest > most {
		t.Errorf("a wait statement held its snapshot %.1fs, longer than %.1fs (Wait %v)", longest, most, tm.Wait)
	}
}
