package pg

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Rounds send the collections of one database together. A collection
// that asks while the database's sessions are busy or still being
// opened (waiting for room in the session budget) waits in a queue; the
// next session free takes the whole queue and sends every collection's
// first queries in one round trip, in one READ ONLY transaction begun in
// the same round trip, then each collection's follow-ups in that
// transaction, and rolls it back (or, when the session's pool is about to
// close it for another database's sake, closes it: its end aborts the
// transaction). Fifty databases on a server sharing a few sessions then
// cost a few round trips each per scrape, not a few per outbox.
//
// Sharing a transaction shares its fate: when the combined queries fail
// (one outbox's table dropped, a statement timed out), each collection
// of the round is sent again alone, in a transaction of its own, so that
// one broken outbox fails only its own collection.
type Rounds struct {
	// pool is held weakly, so that the rounds of a pool nobody uses go
	// with it (RoundsOf); a caller of Run holds it.
	pool     weak.Pointer[pgxpool.Pool]
	sessions int // the pool's MaxConns

	mu      sync.Mutex
	queue   []*job
	leaders int // rounds running, at most the pool's sessions
	// opening counts the leaders still taking their session: a
	// collection that asks meanwhile waits to go in their first round
	// (the collections of one scrape, asking at once, share one
	// transaction) instead of taking another session for itself.
	opening int
	changed chan struct{}
	// rounds counts the rounds sent, ended those whose last
	// transaction ended with the session (tests).
	rounds, ended int
}

// Job is one collection sent in a round.
type Job struct {
	// Before runs on the round's session before the round's transaction
	// (reading a table's columns the first time); it may be nil. When it
	// fails, the job fails with its error and sends nothing.
	Before func(ctx context.Context, conn *pgx.Conn) error
	// Queue returns the job's first queries, and the follow-ups that send
	// more in the same transaction (SendBatch) once those have been read;
	// more may be nil. It is called again, with fresh state, when the job
	// is sent again alone.
	Queue func() (first *pgx.Batch, more func(pgx.Tx) error)
	// After runs on the session after the transaction ended; it may be
	// nil.
	After func(ctx context.Context, conn *pgx.Conn) error
	// Ride, when set, is how long the job waits for a round that another
	// collection leads before it leads one itself: a small read that
	// every scrape makes beside a database's other collections (the
	// server's recovery state) then goes in their transaction instead of
	// one of its own, and waits no longer than Ride when none comes.
	Ride time.Duration
}

type job struct {
	Job
	taken bool       // by a round; under Rounds.mu
	done  chan error // buffered: the round never waits for its caller
	// finished (its result given), failed and more are the round's,
	// while it runs the job.
	finished, failed bool
	more             func(pgx.Tx) error
}

// fail gives jb its error.
func (jb *job) fail(err error) {
	jb.failed = true
	jb.finish(err)
}

func (jb *job) finish(err error) {
	jb.finished = true
	jb.done <- err
}

var (
	roundsMu sync.Mutex
	rounds   = map[weak.Pointer[pgxpool.Pool]]*Rounds{}
)

// RoundsOf returns the rounds of pool, made on first use and dropped
// once the pool is garbage.
func RoundsOf(pool *pgxpool.Pool) *Rounds {
	key := weak.Make(pool)
	roundsMu.Lock()
	defer roundsMu.Unlock()
	r := rounds[key]
	if r == nil {
		r = &Rounds{pool: key, sessions: int(pool.Config().MaxConns), changed: make(chan struct{})}
		rounds[key] = r
		runtime.AddCleanup(pool, func(key weak.Pointer[pgxpool.Pool]) {
			roundsMu.Lock()
			defer roundsMu.Unlock()
			delete(rounds, key)
		}, key)
	}
	return r
}

// Run sends j in the next round of the database and returns its error.
// It returns at ctx's end while j waits for a round; once a round took
// j, it returns when the round is done with j (the round runs under the
// context of the caller that leads it, the same scrape's).
func (r *Rounds) Run(ctx context.Context, j Job) error {
	jb := &job{Job: j, done: make(chan error, 1)}
	var ride <-chan time.Time
	if j.Ride > 0 {
		t := time.NewTimer(j.Ride)
		defer t.Stop()
		ride = t.C
	}
	r.mu.Lock()
	r.queue = append(r.queue, jb)
	r.mu.Unlock()
	for {
		r.mu.Lock()
		lead := ride == nil && !jb.taken && r.leaders < r.sessions && r.opening == 0
		if lead {
			r.leaders++
			r.opening++
		}
		changed := r.changed
		r.mu.Unlock()
		if lead {
			err := r.lead(ctx)
			r.mu.Lock()
			r.leaders--
			r.wakeLocked()
			if err != nil && !jb.taken {
				r.dropLocked(jb)
				r.mu.Unlock()
				return err
			}
			r.mu.Unlock()
		}
		select {
		case err := <-jb.done:
			return err
		case <-changed:
		case <-ride:
			ride = nil
		case <-ctx.Done():
			r.mu.Lock()
			if !jb.taken {
				r.dropLocked(jb)
				r.mu.Unlock()
				return fmt.Errorf("wait for a session of the database: %w", ctx.Err())
			}
			r.mu.Unlock()
			return <-jb.done
		}
	}
}

// Queued reports how many collections wait for a round.
func (r *Rounds) Queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}

// openedLocked notes that a leader took its session and the queue (or
// found no session), and wakes the collections waiting for it.
func (r *Rounds) openedLocked() {
	if r.opening > 0 {
		r.opening--
		r.wakeLocked()
	}
}

func (r *Rounds) wakeLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Rounds) dropLocked(jb *job) {
	for i, q := range r.queue {
		if q == jb {
			r.queue = append(r.queue[:i], r.queue[i+1:]...)
			return
		}
	}
}

// lead takes a session and sends the queue in rounds until it is
// empty (a collection that came late is sent on the same session, not
// on one opened anew); it returns an error only when it found no
// session. A round whose first exchange finds that the session it was
// handed had ended since its last use (pools do not ping, see noPings)
// goes again, whole, on the next session.
func (r *Rounds) lead(ctx context.Context) error {
	opening := true
	defer func() {
		if opening {
			r.mu.Lock()
			r.openedLocked()
			r.mu.Unlock()
		}
	}()
	pool := r.pool.Value()
	if pool == nil {
		return errors.New("acquire a connection: the pool is gone")
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	again := handedOutBefore(conn.Conn())
	var jobs []*job
	for !conn.Conn().IsClosed() {
		if jobs == nil {
			jobs, opening = r.take(opening), false
			if jobs == nil {
				return nil
			}
		}
		ok, ended := r.round(ctx, conn.Conn(), jobs, again)
		if ended {
			conn.Release()
			if conn, err = pool.Acquire(ctx); err != nil {
				conn = nil
				for _, jb := range jobs {
					jb.fail(fmt.Errorf("acquire a connection: %w", err))
				}
				return nil
			}
			again = handedOutBefore(conn.Conn())
			continue
		}
		jobs = nil
		if !ok {
			// A panic may have left the session in the middle of a
			// batch: it sends nothing more.
			closeConn(conn.Conn())
		}
	}
	return nil
}

// take takes the queue for a round; nil when it is empty. For a leader
// still opening, it notes in the same step that the leader opened.
func (r *Rounds) take(opening bool) []*job {
	r.mu.Lock()
	defer r.mu.Unlock()
	if opening {
		r.openedLocked()
	}
	jobs := r.queue
	r.queue = nil
	if len(jobs) == 0 {
		return nil
	}
	for _, jb := range jobs {
		jb.taken = true
	}
	r.rounds++
	return jobs
}

// closesKey keys, in a session's custom data, the budget's word on
// whether the session's pool closes it once given back (budget.go).
const closesKey = "outbox_exporter.closes"

// closes reports whether conn is closed once given back to its pool and
// no collection waits for a round: the round's last transaction then
// ends with the session (readOnlyBatch).
func (r *Rounds) closes(conn *pgx.Conn) bool {
	r.mu.Lock()
	queued := len(r.queue)
	r.mu.Unlock()
	f, _ := conn.PgConn().CustomData()[closesKey].(func() bool)
	if queued > 0 || f == nil || !f() {
		return false
	}
	r.mu.Lock()
	r.ended++
	r.mu.Unlock()
	return true
}

// round sends jobs on conn and gives each its result. A panic in a
// job's code (its callbacks run here, on the leader's goroutine) fails
// the jobs of the round not yet finished, instead of leaving their
// callers waiting for ever; round then reports false. When again (conn
// was handed out before) and the round's first exchange finds the
// session ended (endedBefore), no job has its result: round reports
// ended, and the jobs go again on another session.
func (r *Rounds) round(ctx context.Context, conn *pgx.Conn, jobs []*job, again bool) (ok, ended bool) {
	defer func() {
		if p := recover(); p != nil {
			ok = false
			for _, jb := range jobs {
				if !jb.finished {
					jb.fail(fmt.Errorf("a collection sent in the same round panicked: %v", p))
				}
			}
		}
	}()
	// gone reports whether err says that the session had ended before
	// the round, no job having had its result yet.
	gone := func(err error) bool {
		return again && endedBefore(ctx, conn, err) && !slices.ContainsFunc(jobs, func(jb *job) bool { return jb.finished })
	}
	ready := jobs[:0:0]
	for _, jb := range jobs {
		if jb.Before != nil {
			if err := jb.Before(ctx, conn); err != nil {
				if gone(err) {
					return true, true
				}
				jb.fail(err)
				continue
			}
		}
		ready = append(ready, jb)
	}
	afters := slices.ContainsFunc(ready, func(jb *job) bool { return jb.After != nil })
	failed := ready
	if len(ready) > 1 {
		var err error
		failed, err = together(ctx, conn, ready, func(again []*job) bool {
			return len(again) == 0 && !afters && r.closes(conn)
		})
		if len(failed) == len(ready) && gone(err) {
			return true, true
		}
	}
	for i, jb := range failed {
		first, more := jb.Queue()
		last := func() bool { return i == len(failed)-1 && !afters && r.closes(conn) }
		if err := readOnlyBatch(ctx, conn, first, more, last); err != nil {
			if len(failed) == len(ready) && i == 0 && gone(err) {
				return true, true
			}
			jb.fail(err)
		}
	}
	for _, jb := range ready {
		if jb.failed {
			continue
		}
		if jb.After != nil {
			if err := jb.After(ctx, conn); err != nil {
				jb.fail(err)
				continue
			}
		}
		jb.finish(nil)
	}
	return true, false
}

// together sends jobs' first queries in one batch and then their
// follow-ups, all in one read-only transaction; it returns the jobs to
// send again alone: all of them when the batch failed, those whose
// follow-ups did not run when one failed (which fails with its error).
// last tells, given the jobs to send again, whether the transaction's
// end is the session's (readOnlyBatch). err is the transaction's error.
func together(ctx context.Context, conn *pgx.Conn, jobs []*job, last func(again []*job) bool) (again []*job, err error) {
	b := &pgx.Batch{}
	for _, jb := range jobs {
		first, more := jb.Queue()
		b.QueuedQueries = append(b.QueuedQueries, first.QueuedQueries...)
		jb.more = more
	}
	again = jobs
	// Its error is told by again, the jobs still to send: all when the
	// batch failed, none when only the rollback did (what was read holds).
	err = readOnlyBatch(ctx, conn, b, func(tx pgx.Tx) error {
		for i, jb := range jobs {
			again = jobs[i:]
			if jb.more == nil {
				continue
			}
			if err := jb.more(tx); err != nil {
				jb.fail(err)
				again = jobs[i+1:]
				return err
			}
		}
		again = nil
		return nil
	}, func() bool { return last(again) })
	return again, err
}

// ReadInRound sends the queries queue returns, read-only, through db: in
// the next round of its database when db is a pool, else in a READ ONLY
// transaction of their own. queue is called again, for fresh answers,
// when they are sent again alone.
func ReadInRound(ctx context.Context, db Beginner, queue func() *pgx.Batch) error {
	return RideInRound(ctx, db, 0, queue)
}

// RideInRound is ReadInRound for a read that waits up to ride for a
// round another collection of the database leads (Job.Ride).
func RideInRound(ctx context.Context, db Beginner, ride time.Duration, queue func() *pgx.Batch) error {
	if pool, ok := db.(*pgxpool.Pool); ok {
		return RoundsOf(pool).Run(ctx, Job{Queue: func() (*pgx.Batch, func(pgx.Tx) error) { return queue(), nil }, Ride: ride})
	}
	return ReadOnly(ctx, db, func(tx pgx.Tx) error { return SendBatch(ctx, tx, queue()) })
}
