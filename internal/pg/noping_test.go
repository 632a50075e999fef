package pg

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// countingConn counts the writes of a session that carry pgx's ping.
type countingConn struct {
	net.Conn
	pings *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("-- ping")) {
		c.pings.Add(1)
	}
	return c.Conn.Write(p)
}

// openCounted opens a pool of conns sessions on db whose pings are
// counted.
func openCounted(t *testing.T, db *pgtest.DB, conns int) (*pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	pc, err := PoolConfig(fencedPool(t, db, conns))
	if err != nil {
		t.Fatal(err)
	}
	pings := &atomic.Int64{}
	dial := pc.ConnConfig.DialFunc
	pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, pings: pings}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, pings
}

func selectNow(now *time.Time) func() *pgx.Batch {
	return func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`SELECT now()`).QueryRow(func(row pgx.Row) error { return row.Scan(now) })
		return b
	}
}

// A session handed out again is not pinged: a scrape's rounds and
// transactions send their own statements and nothing more.
func TestPoolsSendNoPings(t *testing.T) {
	db := pgtest.New(t)
	pool, pings := openCounted(t, db, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var now time.Time
	for i := range 4 {
		if err := ReadInRound(ctx, pool, selectNow(&now)); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := ReadOnly(ctx, pool, func(tx pgx.Tx) error { return tx.QueryRow(ctx, "SELECT now()").Scan(&now) }); err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
	}
	if n := pings.Load(); n != 0 {
		t.Errorf("8 uses of one session sent %d pings, want none", n)
	}
}

// endSessions ends the exporter's sessions on db and waits, within a
// minute, until the server has none left.
func endSessions(t *testing.T, db *pgtest.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const mine = `FROM pg_stat_activity WHERE datname = $1 AND application_name = '` + ApplicationName + `'`
	if _, err := db.Admin.Exec(ctx, `SELECT pg_terminate_backend(pid) `+mine, db.Name); err != nil {
		t.Fatal(err)
	}
	for {
		var n int
		if err := db.Admin.QueryRow(ctx, `SELECT count(*) `+mine, db.Name).Scan(&n); err != nil {
			t.Fatalf("sessions of the exporter not gone within a minute: %v", err)
		}
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A session the server ended while it sat in the pool fails neither the
// round nor the transaction it is handed out for next: both go again on
// another session, the round's collections together.
func TestSessionsEndedInThePoolAreReplaced(t *testing.T) {
	db := pgtest.New(t)
	pool, pings := openCounted(t, db, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var now time.Time
	// Each case begins with one session in the pool, used once.
	warm := func() {
		t.Helper()
		if err := ReadInRound(ctx, pool, selectNow(&now)); err != nil {
			t.Fatal(err)
		}
		endSessions(t, db)
	}

	warm()
	if err := ReadInRound(ctx, pool, selectNow(&now)); err != nil {
		t.Errorf("one collection on a session ended in the pool: %v", err)
	}

	warm()
	if err := ReadOnly(ctx, pool, func(tx pgx.Tx) error { return tx.QueryRow(ctx, "SELECT now()").Scan(&now) }); err != nil {
		t.Errorf("a transaction on a session ended in the pool: %v", err)
	}

	warm()
	r := RoundsOf(pool)
	before := r.rounds
	rds := []*reading{{n: 1}, {n: 2}}
	for i, err := range holdAndQueue(t, ctx, pool, []Job{rds[0].job(), rds[1].job()}) {
		if err != nil || rds[i].got != rds[i].n {
			t.Errorf("collection %d of a round on a session ended in the pool: %v, read %d", i, err, rds[i].got)
		}
	}
	if r.rounds != before+1 || !rds[0].now.Equal(rds[1].now) {
		t.Errorf("%d rounds, now() %v and %v: want one round, one transaction", r.rounds-before, rds[0].now, rds[1].now)
	}
	if n := pings.Load(); n != 0 {
		t.Errorf("%d pings, want none", n)
	}
}
