package outbox

import (
	"context"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// batchCounter counts the batches sent through a pool, passing every
// trace on to the tracer it wraps (the read-only fence).
type batchCounter struct {
	next    pgx.QueryTracer
	batches atomic.Int64
}

func (c *batchCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return c.next.TraceQueryStart(ctx, conn, d)
}

func (c *batchCounter) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	c.next.TraceQueryEnd(ctx, conn, d)
}

func (c *batchCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return c.next.(pgx.BatchTracer).TraceBatchStart(ctx, conn, d)
}

func (c *batchCounter) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.next.(pgx.BatchTracer).TraceBatchQuery(ctx, conn, d)
}

func (c *batchCounter) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	c.next.(pgx.BatchTracer).TraceBatchEnd(ctx, conn, d)
}

func (c *batchCounter) TraceAcquireStart(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireStartData) context.Context {
	return c.next.(pgxpool.AcquireTracer).TraceAcquireStart(ctx, p, d)
}

func (c *batchCounter) TraceAcquireEnd(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	c.next.(pgxpool.AcquireTracer).TraceAcquireEnd(ctx, p, d)
}

func (c *batchCounter) TraceRelease(p *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	c.next.(pgxpool.ReleaseTracer).TraceRelease(p, d)
}

// countingPool opens a read-only pool on db's database, seeing the fake
// clock, whose batches are counted.
func countingPool(t *testing.T, ctx context.Context, db *pgtest.DB) (*pgxpool.Pool, *batchCounter) {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", "fakeclock,pg_catalog,public")
	u.RawQuery = q.Encode()
	pc, err := pg.PoolConfig(&config.Database{DSN: config.Secret(u.String()), MaxConnections: 1,
		StatementTimeout: 20 * time.Second, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	counter := &batchCounter{next: pc.ConnConfig.Tracer}
	pc.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, counter
}

// aheadPair samples the same rows with a sampler that reads ahead and
// one that never does.
type aheadPair struct {
	ctx          context.Context
	pool         *pgxpool.Pool
	counter      *batchCounter
	ahead, never *Sampler
}

// step samples with both and compares their snapshots; wantBatches, if
// not 0, is how many batches the sampler reading ahead must send.
func (p *aheadPair) step(t *testing.T, name string, wantBatches int64) {
	t.Helper()
	before := p.counter.batches.Load()
	got, err := p.ahead.Sample(p.ctx, p.pool)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	batches := p.counter.batches.Load() - before
	p.never.ahead = nil
	want, err := p.never.Sample(p.ctx, p.pool)
	if err != nil {
		t.Fatalf("%s, never reading ahead: %v", name, err)
	}
	bySeries := func(a, b Series) int { return strings.Compare(joinLabels(a.Labels), joinLabels(b.Labels)) }
	slices.SortFunc(got.Series, bySeries)
	slices.SortFunc(want.Series, bySeries)
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got.Series), len(want.Series)) {
			if !reflect.DeepEqual(got.Series[i], want.Series[i]) {
				t.Errorf("%s: first series that differs: %+v, never reading ahead %+v", name, got.Series[i], want.Series[i])
				break
			}
		}
		t.Fatalf("%s: %d series (capped %v), never reading ahead %d (capped %v)", name,
			len(got.Series), got.Capped, len(want.Series), want.Capped)
	}
	if wantBatches > 0 && batches != wantBatches {
		t.Errorf("%s: %d batches sent, want %d", name, batches, wantBatches)
	}
}

// failLocked has a sample of s fail: the table locked past its deadline.
func failLocked(t *testing.T, ctx context.Context, db *pgtest.DB, s *Sampler, pool *pgxpool.Pool) {
	t.Helper()
	lock, err := db.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	failed, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = s.Sample(failed, pool)
	stop()
	if rerr := lock.Rollback(ctx); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("a sample of a locked table worked")
	}
}

// TestReadsAheadChangeNothing: while an outbox stays capped with more
// rows claimed than max_count, over more label combinations than the
// series cap admits (so that probes follow the walks), a sample sends
// the follow-up reads of the last one in its first batch: one batch per
// sample while the rows stay as they were, and the series of a sampler
// that never reads ahead on the same rows at the same (fake) time, all
// along: rows unchanged, time passing with claimed rows published, the
// claimed rows down to max_count (the walks sent ahead no longer asked
// for), a failed sample (which forgets them), and capped no more.
func TestReadsAheadChangeNothing(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, fakeClock)
	db.Exec(t, obStatusSchema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, counter := countingPool(t, ctx, db)
	// 12 event types × 10 topics, pending rows up to an hour old; one
	// row in four claimed, leases passed and live, some tried; a stuck
	// row of the override's value, claimed. The walks meet "other"
	// each time (a series holding "other" that no walk met would be left
	// to the per label set skip-scans, which are never read ahead).
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic, status, lease_until, attempts)
	  SELECT '2030-01-01'::timestamptz - (i * 1.7) * interval '1 second', 'ev.' || (i % 12), 'dest.' || ((i / 12) % 10),
	    CASE WHEN i % 4 = 0 THEN 'CLAIMED' ELSE 'PENDING' END,
	    CASE WHEN i % 8 = 0 THEN '2030-01-01'::timestamptz - (i % 300) * interval '1 second'
	         WHEN i % 4 = 0 THEN '2030-01-01'::timestamptz + interval '1 hour' END,
	    CASE WHEN i % 12 = 0 THEN 1 ELSE 0 END
	  FROM generate_series(1, 2000) i;
	  INSERT INTO outbox (created_at, event_type, topic, status, lease_until) VALUES
	    ('2030-01-01'::timestamptz - interval '2 hours', 'order.paid', 'payments', 'CLAIMED', '2030-01-01'::timestamptz - interval '1 hour')`)
	o := obStatusOutbox()
	o.MaxCount, o.MaxLabelValues = 200, 20
	ahead := NewSampler("ob", o)
	p := &aheadPair{ctx: ctx, pool: pool, counter: counter, ahead: ahead, never: NewSampler("ob", o)}
	p.step(t, "first sample", 0)
	var probes int
	for _, a := range ahead.ahead {
		if a.probe {
			probes++
		}
	}
	if probes == 0 || !slices.ContainsFunc(ahead.ahead, func(a aheadRead) bool { return a.count }) {
		t.Fatalf("the capped sample sent %d follow-up reads, %d of them probes and no count: the test reads nothing ahead", len(ahead.ahead), probes)
	}
	p.step(t, "the rows as they were", 1)
	p.step(t, "the rows as they were, again", 1)

	db.Exec(t, `UPDATE fakeclock.clock SET t = t + interval '17 seconds';
	  UPDATE outbox SET status = 'PUBLISHED', published_at = '2030-01-01 00:00:15+00' WHERE status = 'CLAIMED' AND id % 3 = 0`)
	p.step(t, "time passed, a third of the claimed rows published", 0)
	p.step(t, "time passed, as it was", 1)

	db.Exec(t, `UPDATE outbox SET status = 'PUBLISHED', published_at = '2030-01-01 00:00:16+00'
	  WHERE status = 'CLAIMED' AND id IN (SELECT id FROM outbox WHERE status = 'CLAIMED' ORDER BY id OFFSET 150)`)
	p.step(t, "claimed rows down to max_count", 0)
	for _, part := range ahead.spec.ClaimedParts() {
		walk := ahead.spec.ClaimedWalkQuery(part, ahead.spec.ClaimedBudget())
		if slices.ContainsFunc(ahead.ahead, func(a aheadRead) bool { return a.sql == walk }) {
			t.Errorf("with at most max_count rows claimed, a walk of the claimed rows is still sent ahead")
		}
	}

	failLocked(t, ctx, db, ahead, pool)
	if len(ahead.ahead) > 0 {
		t.Errorf("after a failed sample, %d reads are still sent ahead", len(ahead.ahead))
	}
	p.step(t, "after a failed sample", 0)

	db.Exec(t, `UPDATE outbox SET status = 'PUBLISHED', published_at = '2030-01-01 00:00:16+00' WHERE id > 150`)
	p.step(t, "capped no more", 0)
	p.step(t, "capped no more, as it was", 1)
}
