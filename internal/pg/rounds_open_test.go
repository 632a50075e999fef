package pg

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// Collections that ask while the round before them is still taking its
// session go in that round, on that session, in one transaction, though
// the pool could open another session: the collections of one scrape
// ask at once and cost one transaction, not one each.
func TestRoundsJoinALeaderStillOpening(t *testing.T) {
	db := pgtest.New(t)
	pc, err := PoolConfig(fencedPool(t, db, 2))
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	dial := pc.ConnConfig.DialFunc
	pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return dial(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := RoundsOf(pool)
	rds := []*reading{{n: 1}, {n: 2}, {n: 3}}
	errs := make(chan error, len(rds))
	go func() { errs <- r.Run(ctx, rds[0].job()) }()
	waitQueued(t, r, 1)
	// The first leads and waits for its session; the others ask meanwhile.
	for _, rd := range rds[1:] {
		go func() { errs <- r.Run(ctx, rd.job()) }()
	}
	waitQueued(t, r, len(rds))
	close(gate)
	for range rds {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if r.rounds != 1 || !rds[0].now.Equal(rds[1].now) || !rds[0].now.Equal(rds[2].now) {
		t.Errorf("%d rounds, now() %v, %v, %v: want one round, one transaction", r.rounds, rds[0].now, rds[1].now, rds[2].now)
	}
	if n := pool.Stat().TotalConns(); n != 1 {
		t.Errorf("%d sessions opened, want 1", n)
	}
}
