package pg

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// reading is a job reading its own number and the transaction's now(),
// as an outbox's collection reads its rows and now().
type reading struct {
	n   int
	got int
	now time.Time
	sql string // a further query of the first batch, if any
	// more, if set, is a query sent as a follow-up.
	more string
}

func (rd *reading) job() Job {
	return Job{Queue: func() (*pgx.Batch, func(pgx.Tx) error) {
		rd.got, rd.now = 0, time.Time{}
		b := &pgx.Batch{}
		b.Queue(`SELECT $1::int, now()`, rd.n).QueryRow(func(row pgx.Row) error {
			return row.Scan(&rd.got, &rd.now)
		})
		if rd.sql != "" {
			b.Queue(rd.sql)
		}
		if rd.more == "" {
			return b, nil
		}
		return b, func(tx pgx.Tx) error {
			mb := &pgx.Batch{}
			mb.Queue(rd.more)
			return SendBatch(context.Background(), tx, mb)
		}
	}}
}

// holdAndQueue holds pool's one session while n callers run their jobs
// through r, and lets it go once all n wait in r's queue; it returns
// their errors by caller.
func holdAndQueue(t *testing.T, ctx context.Context, pool *pgxpool.Pool, jobs []Job) []error {
	t.Helper()
	r := RoundsOf(pool)
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Let go (again) before the pool closes, should the test fail first.
	t.Cleanup(held.Release)
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Run(ctx, j)
		}()
	}
	waitQueued(t, r, len(jobs))
	held.Release()
	wg.Wait()
	return errs
}

// waitQueued waits, within a minute, until n jobs wait in r's queue.
func waitQueued(t *testing.T, r *Rounds, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		queued := len(r.queue)
		r.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs queued after a minute", queued, n)
		}
	}
}

// The collections that wait while the database's session is busy go in
// one round, in one transaction: each reads its own answers, all read
// the same now().
func TestRoundsSendWaitingCollectionsTogether(t *testing.T) {
	ctx, _, pool := openFenced(t, "")
	rds := make([]*reading, 8)
	var jobs []Job
	for i := range rds {
		rds[i] = &reading{n: 100 + i}
		jobs = append(jobs, rds[i].job())
	}
	for i, err := range holdAndQueue(t, ctx, pool, jobs) {
		if err != nil {
			t.Errorf("job %d: %v", i, err)
		}
	}
	for i, rd := range rds {
		if rd.got != rd.n {
			t.Errorf("job %d read %d, want %d", i, rd.got, rd.n)
		}
		if !rd.now.Equal(rds[0].now) {
			t.Errorf("job %d read now() %v, job 0 %v: not one transaction", i, rd.now, rds[0].now)
		}
	}
	if n := RoundsOf(pool).rounds; n != 1 {
		t.Errorf("%d rounds for 8 waiting collections, want 1", n)
	}
}

// One broken collection in a round (a missing table or a write in its
// first batch, a failing follow-up) fails alone: the others read their
// answers, and nothing is written.
func TestRoundsOneBrokenCollectionFailsAlone(t *testing.T) {
	ctx, db, pool := openFenced(t, `CREATE TABLE written (n int)`)
	for _, round := range [][]*reading{
		{{n: 1}, {n: 2, sql: `SELECT * FROM missing_table`}, {n: 3}, {n: 4, sql: `INSERT INTO written VALUES (4)`}, {n: 5}},
		{{n: 1}, {n: 2, more: `SELECT 1/0`}, {n: 3}, {n: 4, more: `INSERT INTO written VALUES (4)`}, {n: 5, more: `SELECT 1`}},
	} {
		var jobs []Job
		for _, rd := range round {
			jobs = append(jobs, rd.job())
		}
		errs := holdAndQueue(t, ctx, pool, jobs)
		for i, rd := range round {
			if bad := rd.sql + rd.more; bad != "" && bad != `SELECT 1` {
				if errs[i] == nil {
					t.Errorf("job %d (%s) did not fail", i, bad)
				}
				continue
			}
			if errs[i] != nil {
				t.Errorf("job %d failed with the others': %v", i, errs[i])
			}
			if rd.got != rd.n {
				t.Errorf("job %d read %d, want %d", i, rd.got, rd.n)
			}
		}
	}
	var n int
	if err := db.Admin.QueryRow(ctx, `SELECT count(*) FROM written`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rows written through a round", n)
	}
}

// A collection that waits for a round returns at its deadline, whether
// it waits for the session itself or behind another collection that
// does, and is not sent afterwards.
func TestRoundsWaitEndsAtDeadline(t *testing.T) {
	ctx, _, pool := openFenced(t, "")
	r := RoundsOf(pool)
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Let go (again) before the pool closes, should the test fail first.
	t.Cleanup(held.Release)
	sent := 0
	giveUp := func() error {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		var werr error
		testutil.Bounded(t, "a collection waiting for a busy session", 100*time.Millisecond, func() {
			werr = r.Run(wctx, Job{Queue: func() (*pgx.Batch, func(pgx.Tx) error) {
				sent++
				b := &pgx.Batch{}
				b.Queue(`SELECT 1`)
				return b, nil
			}})
		})
		return werr
	}
	// Alone, it waits for the session itself.
	if err := giveUp(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the deadline's", err)
	}
	// Behind another, it waits for that one's round.
	rd := &reading{n: 7}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, rd.job()) }()
	waitQueued(t, r, 1)
	if err := giveUp(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the deadline's", err)
	}
	held.Release()
	if err := <-done; err != nil || rd.got != 7 {
		t.Fatalf("the collection that waited on: %v, read %d", err, rd.got)
	}
	if sent > 0 {
		t.Errorf("the collections that gave up were sent %d times", sent)
	}
}

// A statement is sent unnamed the first time on a session and prepared
// (its plan kept by the server) from its second sending on.
func TestRoundsPrepareWhatASessionSendsAgain(t *testing.T) {
	ctx, _, pool := openFenced(t, "")
	r := RoundsOf(pool)
	const sql = `SELECT $1::int, now()`
	var prepared []int
	for n := range 3 {
		rd := &reading{n: n}
		j := rd.job()
		j.After = func(ctx context.Context, conn *pgx.Conn) error {
			var k int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&k)
			prepared = append(prepared, k)
			return err
		}
		if err := r.Run(ctx, j); err != nil || rd.got != n {
			t.Fatalf("collection %d: %v, read %d", n, err, rd.got)
		}
	}
	if fmt.Sprint(prepared) != "[0 1 1]" {
		t.Errorf("the statement prepared on the session after each collection: %v, want [0 1 1]", prepared)
	}
}

// A statement queued with Unprepared is sent unnamed however often a
// session sends it, in the first batch as in a follow-up, and reads its
// arguments as any other.
func TestRoundsNeverPrepareUnprepared(t *testing.T) {
	ctx, _, pool := openFenced(t, "")
	r := RoundsOf(pool)
	const first, more = `SELECT $1::int + 1`, `SELECT $1::int + 2`
	var prepared []int
	for n := range 3 {
		var got1, got2 int
		j := Job{Queue: func() (*pgx.Batch, func(pgx.Tx) error) {
			b := &pgx.Batch{}
			b.Queue(first, Unprepared, n).QueryRow(func(row pgx.Row) error { return row.Scan(&got1) })
			return b, func(tx pgx.Tx) error {
				mb := &pgx.Batch{}
				mb.Queue(more, Unprepared, n).QueryRow(func(row pgx.Row) error { return row.Scan(&got2) })
				return SendBatch(ctx, tx, mb)
			}
		}}
		j.After = func(ctx context.Context, conn *pgx.Conn) error {
			var k int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement IN ($1, $2)`, first, more).Scan(&k)
			prepared = append(prepared, k)
			return err
		}
		if err := r.Run(ctx, j); err != nil || got1 != n+1 || got2 != n+2 {
			t.Fatalf("collection %d: %v, read %d and %d", n, err, got1, got2)
		}
	}
	if fmt.Sprint(prepared) != "[0 0 0]" {
		t.Errorf("the statements prepared on the session after each collection: %v, want [0 0 0]", prepared)
	}
}

// ReadInRound joins the round of a pool's database, sharing its
// transaction, and on any other Beginner reads in a transaction of its
// own.
func TestReadInRound(t *testing.T) {
	ctx, db, pool := openFenced(t, "")
	rd := &reading{n: 1}
	var now time.Time
	read := func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`SELECT now()`).QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
		return b
	}
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Let go (again) before the pool closes, should the test fail first.
	t.Cleanup(held.Release)
	r := RoundsOf(pool)
	done := make(chan error, 2)
	go func() { done <- r.Run(ctx, rd.job()) }()
	go func() { done <- ReadInRound(ctx, pool, read) }()
	waitQueued(t, r, 2)
	held.Release()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if !now.Equal(rd.now) || r.rounds != 1 {
		t.Errorf("ReadInRound read now() %v, the waiting collection %v, in %d rounds (want 1)", now, rd.now, r.rounds)
	}
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	now = time.Time{}
	if err := ReadInRound(ctx, conn, read); err != nil || now.IsZero() {
		t.Errorf("on a connection: %v, read now() %v", err, now)
	}
}

// The rounds of a pool go once the pool is garbage: an exporter reloaded
// many times keeps none of its old pools' rounds.
func TestRoundsGoWithTheirPool(t *testing.T) {
	db := pgtest.New(t)
	pool, err := Open(context.Background(), fencedPool(t, db, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := RoundsOf(pool).Run(context.Background(), (&reading{n: 1}).job()); err != nil {
		t.Fatal(err)
	}
	key := weak.Make(pool)
	pool.Close()
	pool = nil
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		runtime.GC()
		roundsMu.Lock()
		_, kept := rounds[key]
		roundsMu.Unlock()
		if !kept {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the rounds of a closed pool nobody holds are still kept after a minute")
		}
	}
}

// A collection whose code panics in a round fails the round's
// collections with an error instead of leaving them waiting, and the
// next round goes on a fresh session.
func TestRoundsSurviveAPanic(t *testing.T) {
	ctx, _, pool := openFenced(t, "")
	rd := &reading{n: 1}
	bad := Job{Queue: func() (*pgx.Batch, func(pgx.Tx) error) {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`).QueryRow(func(pgx.Row) error { panic("a label it cannot encode") })
		return b, nil
	}}
	var errs []error
	testutil.Bounded(t, "a round with a panicking collection", 5*time.Second, func() {
		errs = holdAndQueue(t, ctx, pool, []Job{rd.job(), bad})
	})
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "panicked") {
			t.Errorf("job %d: error %v, want one saying a collection panicked", i, err)
		}
	}
	rd = &reading{n: 2}
	if err := RoundsOf(pool).Run(ctx, rd.job()); err != nil || rd.got != 2 {
		t.Errorf("the next round: %v, read %d", err, rd.got)
	}
}

// On a crowded server (a collection of another database waits for room),
// a round's last transaction ends with its session, closed at once
// instead of rolled back first; without a waiter it is rolled back and
// the session kept.
func TestRoundsEndWithTheSessionOnACrowdedServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := NewBudgets(1)
	var pools []*pgxpool.Pool
	for range 2 {
		pool, closePool, err := OpenShared(ctx, fencedPool(t, pgtest.New(t), 1), b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closePool)
		pools = append(pools, pool)
	}
	waiting := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		n := 0
		for _, s := range b.servers {
			n += s.waiting
		}
		return n
	}
	other := make(chan error, 1)
	crowd := func(pgx.Tx) error {
		go func() { other <- RoundsOf(pools[1]).Run(ctx, (&reading{n: 2}).job()) }()
		for deadline := time.Now().Add(time.Minute); waiting() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("the other database's collection did not wait for room")
			}
		}
		return nil
	}
	r := RoundsOf(pools[0])
	for i, more := range []func(pgx.Tx) error{nil, crowd} {
		rd := &reading{n: 1}
		j := rd.job()
		queue := j.Queue
		j.Queue = func() (*pgx.Batch, func(pgx.Tx) error) {
			first, _ := queue()
			return first, more
		}
		if err := r.Run(ctx, j); err != nil || rd.got != 1 {
			t.Fatalf("round %d: %v, read %d", i, err, rd.got)
		}
		if r.ended != i {
			t.Errorf("after round %d, %d rounds ended with their session, want %d", i, r.ended, i)
		}
	}
	if err := <-other; err != nil {
		t.Errorf("the other database's collection: %v", err)
	}
	if open, err := b.Open(fencedPool(t, pgtest.New(t), 1)); err != nil || open != 1 {
		t.Errorf("%d sessions open on the server (%v), want the other database's 1", open, err)
	}
}
