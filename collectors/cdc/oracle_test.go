package cdc

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

var (
	cdcOracleSeeds = flag.Int("cdc.seeds", 4, "cdc oracle: how many generated histories to run (CI runs the default)")
	cdcOracleFirst = flag.Uint64("cdc.seed", 1, "cdc oracle: the first seed")
)

// cdcRegressionSeeds once found a fault; they run with every count.
//
// The checkpoint seeded after a start: a slot just past the last
// checkpoint read the end of the checkpoint's second as its confirmed
// time, after the position had left it: a lag under the truth and its
// first rows read published. Seed 1 found it; with today's generator
// seed 3 shows it at every run.
//
// The written position: a transaction committed asynchronously is
// visible before its WAL is written, and the position the exporter
// sampled was the written one (pg_current_wal_lsn), so a slot confirmed
// up to it read caught up and the row published until the WAL writer
// came round. Seed 3 found it under an earlier generator; whether a
// scrape falls before the WAL writer's round depends on the clock, so
// TestAsyncCommitIsPendingBeforeItsWALIsWritten holds it for certain
// (seeds 2, 4 and 5 showed it in some runs).
//
// Behind the checkpoint: a slot confirmed behind the last checkpoint
// before an exporter start read the time since the checkpoint, a lower
// bound (0 within the checkpoint's second), and the linked outbox only
// the rows committed since, a subset of the pending ones. Every seed
// showed it: seeds 1 and 3 in their random steps, seed 2 only in the
// starts that end every history.
var cdcRegressionSeeds = []uint64{1, 2, 3}

// The CDC oracle: seeded histories on a throwaway cluster (wal_level =
// logical, track_commit_timestamp = on) of WAL bursts in another table,
// outbox rows (some committed asynchronously), slot confirms, quiet
// stretches, checkpoints and exporter restarts (a new collector, with a
// fresh history, and a new linked outbox collector) at random points,
// scraped at random points. The
// truth comes from everything the test saw: its own (time, position)
// observations before and after every step and scrape, bracketing when
// the server's position left the slot's confirmed one, and the commit
// timestamps of its own transactions, which tell the rows the slot has
// not confirmed. At every scrape the exporter's lag must be on the
// pending side of that truth unless it says it is a lower bound, within
// one collection interval of it when it says neither bound, the least
// lag it gives never over the truth, and the linked outbox's pending
// rows a superset of the true ones (a subset, when a lower bound). A
// slot confirmed behind the checkpoint the exporter started after, with
// commit times kept, must not read a lower bound: its lag brackets the
// truth and its pending rows are a superset.
func TestCDCOracle(t *testing.T) {
	s := startCommitTSServer(t)
	seeds := slices.Clone(cdcRegressionSeeds)
	for i := 0; i < *cdcOracleSeeds; i++ {
		if seed := *cdcOracleFirst + uint64(i); !slices.Contains(seeds, seed) {
			seeds = append(seeds, seed)
		}
	}
	cov := map[string]int{}
	for _, seed := range seeds {
		o := newOracleRun(t, s, seed, cov)
		for i := 0; i < 40; i++ {
			o.step()
		}
		o.restarts()
	}
	t.Logf("checks by what the exporter said: %v", cov)
	// The run must have seen every kind of answer, or it proved less
	// than it claims.
	for _, k := range []string{"exact", "upper bound", "behind the checkpoint", "caught up", "rows pending"} {
		if cov[k] == 0 {
			t.Errorf("no scrape saw %q: the histories do not cover it", k)
		}
	}
}

// obsPoint is one observation by the test: the server's inserted
// position was at most lsn at t1 and at least lsn at t2; flushed is its
// flushed position in between, which a slot can be advanced to.
type obsPoint struct {
	t1, t2       time.Time
	lsn, flushed LSN
}

// oracleTxn is one transaction of outbox rows the test wrote: it began
// after pre, its commit record follows commitAfter, and it ended before
// post.
type oracleTxn struct {
	ids       []int64
	pre, post LSN
	// commitAfter: a slot confirmed up to it has not got the commit.
	commitAfter LSN
	created     time.Time
	committed   time.Time
}

type oracleRun struct {
	t    *testing.T
	seed uint64
	r    *rand.Rand
	s    *server
	slot string
	cov  map[string]int

	obs       []obsPoint
	txns      []oracleTxn
	confirmed LSN
	// redo is the last checkpoint's redo position when this exporter
	// started: a slot confirmed behind it is older than anything the
	// exporter can sample.
	redo LSN
	// The exporter instance: its collectors and the times of its
	// collections' samples.
	c       *Collector
	oc      *outbox.Collector
	samples []time.Time
}

func newOracleRun(t *testing.T, s *server, seed uint64, cov map[string]int) *oracleRun {
	o := &oracleRun{t: t, seed: seed, r: rand.New(rand.NewPCG(seed, 29)), s: s, slot: fmt.Sprintf("oracle_%d", seed), cov: cov}
	s.exec(t, `TRUNCATE outbox, other`)
	s.exec(t, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots`)
	s.exec(t, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, o.slot)
	o.confirmed = s.confirmed(t, o.slot)
	o.observe()
	o.restart()
	return o
}

// observe records the server's position, bracketed by its clock.
func (o *oracleRun) observe() obsPoint {
	o.t.Helper()
	var (
		p            obsPoint
		lsn, flushed string
	)
	err := o.s.admin.QueryRow(context.Background(),
		`SELECT clock_timestamp(), pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text, clock_timestamp()`).Scan(&p.t1, &lsn, &flushed, &p.t2)
	if err != nil {
		o.t.Fatal(err)
	}
	if p.lsn, err = ParseLSN(lsn); err != nil {
		o.t.Fatal(err)
	}
	if p.flushed, err = ParseLSN(flushed); err != nil {
		o.t.Fatal(err)
	}
	o.obs = append(o.obs, p)
	return p
}

func (o *oracleRun) fatalf(format string, args ...any) {
	o.t.Helper()
	o.t.Fatalf("seed %d: %s", o.seed, fmt.Sprintf(format, args...))
}

// step runs one random step, then scrapes half the time.
func (o *oracleRun) step() {
	switch k := o.r.IntN(100); {
	case k < 25:
		o.burst()
	case k < 50:
		o.rows()
	case k < 68:
		o.confirm()
	case k < 80:
		o.idle()
	case k < 90:
		o.restart()
	case k < 95:
		o.s.exec(o.t, `CHECKPOINT`)
		o.observe()
	default:
		o.scrape()
	}
	if o.r.IntN(2) == 0 {
		o.scrape()
	}
}

// burst writes WAL the slot's connector does not care about.
func (o *oracleRun) burst() {
	o.observe()
	o.s.exec(o.t, `INSERT INTO other (payload) SELECT repeat(md5(g::text), 30) FROM generate_series(1, $1::int) g`, 1+o.r.IntN(3000))
	o.observe()
}

// rows writes a few transactions of outbox rows, a third of them
// committed asynchronously (their WAL is written after they are
// visible), and records, for each, the positions around it, the position
// its commit record follows, and its commit time.
func (o *oracleRun) rows() {
	for n := 1 + o.r.IntN(4); n > 0; n-- {
		pre := o.observe()
		tx := o.writeRows(1+o.r.IntN(5), o.r.IntN(3) == 0)
		post := o.observe()
		tx.pre, tx.post = pre.lsn, post.lsn
		err := o.s.admin.QueryRow(context.Background(),
			`SELECT pg_xact_commit_timestamp(xmin), created_at FROM outbox WHERE id = $1`, tx.ids[0]).Scan(&tx.committed, &tx.created)
		if err != nil {
			o.fatalf("commit time: %v", err)
		}
		o.txns = append(o.txns, tx)
	}
}

// writeRows inserts n outbox rows in one transaction.
func (o *oracleRun) writeRows(n int, async bool) oracleTxn {
	ctx := context.Background()
	var tx oracleTxn
	t, err := o.s.admin.Begin(ctx)
	if err != nil {
		o.fatalf("begin: %v", err)
	}
	defer func() { _ = t.Rollback(ctx) }()
	if async {
		if _, err := t.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			o.fatalf("%v", err)
		}
	}
	rows, err := t.Query(ctx, `INSERT INTO outbox (payload) SELECT 'e' || g FROM generate_series(1, $1::int) g RETURNING id`, n)
	if err != nil {
		o.fatalf("write outbox rows: %v", err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			o.fatalf("%v", err)
		}
		tx.ids = append(tx.ids, id)
	}
	if rows.Close(); rows.Err() != nil {
		o.fatalf("write outbox rows: %v", rows.Err())
	}
	var inTx string
	if err := t.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&inTx); err != nil {
		o.fatalf("%v", err)
	}
	if tx.commitAfter, err = ParseLSN(inTx); err != nil {
		o.fatalf("%v", err)
	}
	if err := t.Commit(ctx); err != nil {
		o.fatalf("commit outbox rows: %v", err)
	}
	return tx
}

// confirm plays the connector: it confirms up to the server's position
// now or after one of the steps so far, never backwards.
func (o *oracleRun) confirm() {
	target := o.observe().flushed
	if o.r.IntN(2) == 0 {
		var later []LSN
		for _, p := range o.obs {
			if p.flushed > o.confirmed {
				later = append(later, p.flushed)
			}
		}
		if len(later) > 0 {
			target = later[o.r.IntN(len(later))]
		}
	}
	// The flushed position of an asynchronous commit may stop inside
	// its transaction: confirm up to its commit record, not into it.
	for _, tx := range o.txns {
		if tx.commitAfter < target && target < tx.post {
			target = tx.commitAfter
		}
	}
	o.confirmTo(target)
}

func (o *oracleRun) confirmTo(target LSN) {
	o.s.exec(o.t, `SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)`, o.slot, target.String())
	o.confirmed = o.s.confirmed(o.t, o.slot)
	o.observe()
}

// idle is a quiet stretch: no writes for a while, scraped now and then.
// How many times it looks depends on the machine's speed, so its
// choices come from a generator of its own: the history's steps stay
// the seed's.
func (o *oracleRun) idle() {
	start := o.observe()
	d := time.Duration(300+o.r.IntN(1700)) * time.Millisecond
	local := rand.New(rand.NewPCG(o.r.Uint64(), 0))
	for {
		p := o.observe()
		if p.t1.Sub(start.t2) > d {
			return
		}
		if local.IntN(3) == 0 {
			o.scrape()
		} else {
			time.Sleep(50 * time.Millisecond) // pacing only: the verdict reads the server's clock
		}
	}
}

// restarts ends every history with the two starts an exporter can make
// after the connector stalled: one with the slot between the last
// checkpoint and the first collection (an upper bound from the
// checkpoint), one with the slot behind the last checkpoint (an upper
// bound from a commit below its catalog_xmin); then the connector
// catches up.
func (o *oracleRun) restarts() {
	o.s.exec(o.t, `CHECKPOINT`)
	o.observe()
	o.confirmTo(o.observe().flushed)
	o.burst()
	o.rows()
	o.restart()
	o.scrape()
	o.s.exec(o.t, `CHECKPOINT`)
	o.observe()
	o.restart()
	o.scrape()
	o.scrape()
	o.confirmTo(o.observe().flushed)
	o.scrape()
}

// restart is a new exporter: collectors with nothing remembered.
func (o *oracleRun) restart() {
	o.c = newCollector(o.s, map[string]*config.CDC{"orders": {Database: "main", Slot: o.slot, Deadline: time.Minute}})
	o.oc = linkedOutbox(o.s, o.c, "orders")
	o.samples = nil
	var redo string
	if err := o.s.admin.QueryRow(context.Background(), `SELECT redo_lsn::text FROM pg_control_checkpoint()`).Scan(&redo); err != nil {
		o.fatalf("read the last checkpoint: %v", err)
	}
	var err error
	if o.redo, err = ParseLSN(redo); err != nil {
		o.fatalf("%v", err)
	}
}
