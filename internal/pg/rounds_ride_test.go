package pg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// A riding read waits for the round of the database's next collection,
// though a session is free, and goes in its transaction; one that no
// collection joins is sent alone once its ride is over.
func TestRideInRoundGoesInTheNextCollectionsRound(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := Open(ctx, fencedPool(t, db, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r := RoundsOf(pool)
	var now time.Time
	read := func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`SELECT now()`).QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
		return b
	}
	// A session opened and idle: a read that led a round would take
	// it at once.
	if err := ReadInRound(ctx, pool, read); err != nil {
		t.Fatal(err)
	}
	r.rounds = 0
	rode := make(chan error, 1)
	go func() { rode <- RideInRound(ctx, pool, time.Hour, read) }()
	// Until the collection comes, the read waits in the queue, leading
	// no round (one that led a round of its own would have left it at
	// once, and ended).
	waitQueued(t, r, 1)
	r.mu.Lock()
	leaders := r.leaders
	r.mu.Unlock()
	if leaders != 0 {
		t.Fatalf("%d rounds under way while the riding read waits, want none", leaders)
	}
	rd := &reading{n: 7}
	if err := r.Run(ctx, rd.job()); err != nil {
		t.Fatal(err)
	}
	if err := <-rode; err != nil {
		t.Fatal(err)
	}
	if rd.got != 7 || !now.Equal(rd.now) || r.rounds != 1 {
		t.Fatalf("the collection read %d at %v, the riding read %v, in %d rounds; want 7, one transaction, one round",
			rd.got, rd.now, now, r.rounds)
	}

	now = time.Time{}
	if err := RideInRound(ctx, pool, time.Millisecond, read); err != nil || now.IsZero() || r.rounds != 2 {
		t.Fatalf("a riding read alone: %v, read now() %v, %d rounds (want a round of its own)", err, now, r.rounds)
	}
}
