package pg

import (
	"context"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// watchSessions counts, as the server sees them, the exporter's sessions
// on dbs, until stop is closed, and returns the most it saw at once.
func watchSessions(t *testing.T, dbs []string, stop <-chan struct{}) <-chan int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	most := make(chan int, 1)
	go func() {
		defer conn.Close(context.Background())
		peak := 0
		for {
			var n int
			err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND datname = ANY($2)`, ApplicationName, dbs).Scan(&n)
			if err == nil {
				peak = max(peak, n)
			}
			select {
			case <-stop:
				most <- peak
				return
			default:
			}
		}
	}()
	return most
}

// Many callers on six databases of one server, each database's pool
// allowing two sessions, never hold more than the budget's three sessions
// there (counted by the server), and every call succeeds: a caller waits
// for room, made by closing a session another database no longer uses.
func TestBudgetBoundsSessionsPerServer(t *testing.T) {
	const limit = 3
	b := NewBudgets(limit)
	var pools []*pgxpool.Pool
	var names []string
	for range 6 {
		db := pgtest.New(t)
		names = append(names, db.Name)
		pool, closePool, err := OpenShared(context.Background(), fencedPool(t, db, 2), b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closePool)
		pools = append(pools, pool)
	}
	stop := make(chan struct{})
	most := watchSessions(t, names, stop)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var peakOpen atomic.Int64
	rng := rand.New(rand.NewSource(29))
	start := time.Now()
	for i := range 120 {
		pool := pools[rng.Intn(len(pools))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := ReadOnly(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELECT pg_sleep(0.005)`)
				return err
			})
			if err != nil {
				failed.Add(1)
				t.Errorf("call %d: %v", i, err)
			}
			n, _ := b.Open(fencedPool(t, &pgtest.DB{URL: pgtest.ServerURL()}, 1))
			for p := peakOpen.Load(); int64(n) > p && !peakOpen.CompareAndSwap(p, int64(n)); p = peakOpen.Load() {
			}
		}()
	}
	wg.Wait()
	close(stop)
	peak := <-most
	t.Logf("at most %d sessions seen by the server, %d counted by the budget; %d calls failed; %v", peak, peakOpen.Load(), failed.Load(), time.Since(start))
	if peak > limit || peakOpen.Load() > limit {
		t.Errorf("the server saw %d sessions at once, the budget counted %d: more than sessions_per_server %d", peak, peakOpen.Load(), limit)
	}
	if peak < 2 {
		t.Errorf("the server saw at most %d session: the calls did not overlap, the test proved nothing", peak)
	}
}

// A session taken through AcquireSession (as a leader-election lease is)
// counts: with the whole budget taken, a pool's query waits and fails at
// its deadline naming sessions_per_server, and succeeds once one is given
// back.
func TestAcquireSessionCounts(t *testing.T) {
	b := NewBudgets(2)
	db := pgtest.New(t)
	cfg := fencedPool(t, db, 2)
	pool, closePool, err := OpenShared(context.Background(), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	defer closePool()
	var releases []func()
	for range 2 {
		release, err := b.AcquireSession(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	query := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return ReadOnly(ctx, pool, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, `SELECT 1`); return err })
	}
	if err := query(300 * time.Millisecond); err == nil {
		t.Errorf("a query with the budget taken succeeded")
	}
	releases[0]()
	releases[0]() // a second release gives nothing back
	if err := query(30 * time.Second); err != nil {
		t.Errorf("a query after a session was given back: %v", err)
	}
	// The pool's session is closed when it comes back while another dial
	// waits for room (the one the timed-out query started may still be
	// pending), so the count settles rather than holds at once: wait for
	// it, within a deadline.
	if n := settledCount(t, b, cfg, 2); n != 2 {
		t.Errorf("%d sessions counted, want the held one and the pool's", n)
	}
	releases[1]()
	if n := settledCount(t, b, cfg, 1); n != 1 {
		t.Errorf("%d sessions counted after both releases, want the pool's idle one", n)
	}
	if _, err := b.AcquireSession(context.Background(), &config.Database{DSN: "host=x port=notaport"}); err == nil {
		t.Errorf("a DSN that does not parse was given a session")
	}
}

// A replica's lease session (leader election) counts against the budget
// of its server like a pool's: it takes room when dialled, waits for room
// when there is none, and gives it back when closed.
func TestLeaseSessionCounts(t *testing.T) {
	b := NewBudgets(2)
	db := pgtest.New(t)
	cfg := fencedPool(t, db, 2)
	ka := LeaseKeepalive{Idle: time.Second, Interval: time.Second, Count: 2}
	conn, err := OpenLeaseSession(context.Background(), cfg, "outbox_exporter leader test", ka, b)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Open(cfg); n != 1 {
		t.Errorf("%d sessions counted with the lease session open, want 1", n)
	}
	release, err := b.AcquireSession(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if c, err := OpenLeaseSession(ctx, cfg, "outbox_exporter leader test", ka, b); err == nil {
		c.Close(context.Background())
		t.Errorf("a second lease session opened with the budget of 2 taken")
	}
	release()
	if err := conn.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Open(cfg); n != 0 {
		t.Errorf("%d sessions counted after the lease session closed, want 0", n)
	}
}

// settledCount waits up to 30 s for the count of db's server to be want
// and returns the last count seen; it never exceeds the budget meanwhile.
func settledCount(t *testing.T, b *Budgets, db *config.Database, want int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, _ := b.Open(db)
		if n > b.Limit() {
			t.Errorf("%d sessions counted, over the budget of %d", n, b.Limit())
		}
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With a lease session held on the server, the pools' shares leave its
// room: two databases whose pools may each hold two sessions, on a server
// allowing four, have every pool session busy at once beside the lease,
// again and again, and no session is closed to make room for another
// (each pool dials each of its sessions once).
func TestPoolsLeaveRoomForTheLease(t *testing.T) {
	const limit = 4
	b := NewBudgets(limit)
	dbs := map[string]*config.Database{}
	for _, name := range []string{"main", "search"} {
		dbs[name] = fencedPool(t, pgtest.New(t), 2)
	}
	b.Plan(dbs, dbs["main"])
	ka := LeaseKeepalive{Idle: time.Second, Interval: time.Second, Count: 2}
	lease, err := OpenLeaseSession(context.Background(), dbs["main"], "outbox_exporter leader test", ka, b)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close(context.Background())
	var pools []*pgxpool.Pool
	sizes := 0
	for _, name := range []string{"main", "search"} {
		pool, closePool, err := OpenShared(context.Background(), dbs[name], b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closePool)
		pools = append(pools, pool)
		sizes += int(pool.Config().MaxConns)
	}
	if sizes+1 > limit {
		t.Fatalf("pools of %d sessions and the lease on a server allowing %d", sizes, limit)
	}
	for round := range 5 {
		if err := holdAll(pools); err != nil {
			t.Fatalf("round %d: every pool session busy at once beside the lease: %v", round, err)
		}
	}
	var dialled int64
	for _, pool := range pools {
		dialled += pool.Stat().NewConnsCount()
	}
	if dialled != int64(sizes) {
		t.Errorf("pools of %d sessions dialled %d: sessions were closed to make room", sizes, dialled)
	}
}

// holdAll takes every session of each pool at once, runs a statement on
// each, and gives them all back, whether or not it could take them all.
func holdAll(pools []*pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held []*pgxpool.Conn
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for _, pool := range pools {
		for range pool.Config().MaxConns {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			held = append(held, c)
			if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
				return err
			}
		}
	}
	return nil
}
