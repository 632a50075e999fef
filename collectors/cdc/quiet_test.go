package cdc

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// startCommitTSServer is a wal_level = logical cluster that keeps commit
// timestamps (what an outbox behind a slot needs), with an outbox table
// that keeps its rows and a table the application writes other data to.
func startCommitTSServer(t *testing.T) *server {
	t.Helper()
	s := startServer(t, cdctest.Options{Settings: map[string]string{
		"track_commit_timestamp": "on",
		// Only the test's own steps write WAL: no autovacuum, no timed
		// or size-triggered checkpoint in the middle.
		"autovacuum": "off", "checkpoint_timeout": "1d", "max_wal_size": "4GB",
		// An asynchronous commit stays unwritten until the WAL writer's
		// next round: long enough for a scrape to look in between.
		"wal_writer_delay": "10s",
	}})
	s.exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp(), payload text)`)
	s.exec(t, `CREATE INDEX ON outbox (created_at)`)
	s.exec(t, `CREATE TABLE other (id bigserial PRIMARY KEY, payload text)`)
	return s
}

// linkedOutboxConfig is the table outbox, which keeps its rows.
func linkedOutboxConfig() *config.Outbox {
	return &config.Outbox{Database: "main", Table: "public.outbox", ID: "id", CreatedAt: "created_at", Deadline: time.Minute,
		MaxLabelValues: config.DefaultMaxLabelValues, MaxCount: config.DefaultMaxCount}
}

// linkedOutbox is the collector of the table outbox, published by the
// slot of c's entry cdc.
func linkedOutbox(s *server, c *Collector, cdc string) *outbox.Collector {
	oc := outbox.NewCollector("outbox", linkedOutboxConfig(), s.ro, testutil.Quiet())
	oc.PublishedBySlot(func(ctx context.Context) (outbox.Confirmed, error) {
		st, err := c.State(ctx, cdc)
		return outbox.Confirmed{At: st.ConfirmedAt, LowerBound: st.LowerBound}, err
	}, outbox.DefaultBehindLookback)
	return oc
}

// outboxReading is one collection of the linked outbox: its pending rows
// and the oldest one's age.
func outboxReading(t *testing.T, oc *outbox.Collector) (pending, oldest float64, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan prometheus.Metric, 256)
	err = oc.Update(ctx, ch)
	close(ch)
	for m := range ch {
		switch {
		case testutil.IsMetric(m, "outbox_events") && testutil.LabelOf(t, m, "state") == "pending":
			pending += testutil.MetricValue(t, m)
		case testutil.IsMetric(m, "outbox_oldest_pending_age_seconds"):
			oldest = max(oldest, testutil.MetricValue(t, m))
		}
	}
	return pending, oldest, err
}

// A burst of other writes, the connector confirms all of it, one outbox
// row, then the connector stalls on a quiet database. The row is pending
// from its commit on, at every collection, however long the quiet lasts:
// the slot's lag never reads under the row's age and the linked outbox
// counts the row. (Placing the slot's position by linear interpolation
// between the collection before the burst and the newest one, whose time
// moves on while the position stays put, put the slot near now: lag and
// pending read 0 for as long as the database stayed quiet.)
func TestQuietStallAfterBurstKeepsTheRowPending(t *testing.T) {
	s := startCommitTSServer(t)
	s.exec(t, `SELECT pg_create_logical_replication_slot('quiet', 'test_decoding')`)
	c := newCollector(s, map[string]*config.CDC{"orders": {Database: "main", Slot: "quiet", Deadline: time.Minute}})
	oc := linkedOutbox(s, c, "orders")
	s.exec(t, `SELECT pg_replication_slot_advance('quiet', pg_current_wal_lsn())`)
	if _, err := collect(t, c); err != nil {
		t.Fatal(err)
	}
	// Out of the first collection's second, so that the next ones keep
	// their own samples (History's minimum gap).
	before := s.position(t)
	waitFor(t, "a second passes on the server", 10*time.Second, func() (bool, string) {
		return s.position(t).At.Sub(before.At) > HistoryMinGap, ""
	})
	s.exec(t, `INSERT INTO other (payload) SELECT repeat(md5(g::text), 30) FROM generate_series(1, 3000) g`)
	s.exec(t, `SELECT pg_replication_slot_advance('quiet', pg_current_wal_lsn())`)
	var committed time.Time
	s.exec(t, `INSERT INTO outbox (payload) VALUES ('the one row')`)
	if err := s.admin.QueryRow(context.Background(), `SELECT pg_xact_commit_timestamp(xmin) FROM outbox`).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	// The quiet stretch: nothing but the collections reads the server.
	last := time.Time{}
	for round := 0; round < 5; round++ {
		waitFor(t, "the next collection's second", 10*time.Second, func() (bool, string) {
			return s.position(t).At.Sub(last) > HistoryMinGap, ""
		})
		m, err := collect(t, c)
		if err != nil {
			t.Fatal(err)
		}
		h := c.History().Samples()
		now := h[len(h)-1]
		last = now.At
		lag, truth := m.get(t, "outbox_cdc_slot_lag_seconds", "orders"), now.At.Sub(committed).Seconds()
		if lag < truth || m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders") != 0 || m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders") != 0 {
			t.Errorf("round %d: lag %vs (bounds %v, %v) under the row's age %vs, or not exact", round, lag,
				m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders"), m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders"), truth)
		}
		pending, oldest, err := outboxReading(t, oc)
		if err != nil {
			t.Fatal(err)
		}
		if pending != 1 || oldest < truth-0.01 {
			t.Errorf("round %d: the linked outbox reads %v pending, oldest %vs; want the one row, about %vs old", round, pending, oldest, truth)
		}
		t.Logf("round %d: lag %.3fs, row age %.3fs, pending %v, oldest %.3fs", round, lag, truth, pending, oldest)
	}
}

// A transaction committed asynchronously (synchronous_commit = off) is
// visible at once, but its WAL is written only at the WAL writer's next
// round: the server's written position (pg_current_wal_lsn) stays behind
// its commit for up to wal_writer_delay (10 s here). A slot confirmed up
// to that written position has not got the row. Measured against the
// written position, the slot read caught up and the row read published
// until the WAL writer came round; measured against the inserted position
// the row is pending at once.
func TestAsyncCommitIsPendingBeforeItsWALIsWritten(t *testing.T) {
	s := startServer(t, cdctest.Options{Settings: map[string]string{"track_commit_timestamp": "on",
		"wal_writer_delay": "10s", "autovacuum": "off", "checkpoint_timeout": "1d"}})
	s.exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp(), payload text)`)
	s.exec(t, `SELECT pg_create_logical_replication_slot('async', 'test_decoding')`)
	c := newCollector(s, map[string]*config.CDC{"orders": {Database: "main", Slot: "async", Deadline: time.Minute}})
	oc := linkedOutbox(s, c, "orders")
	if _, err := collect(t, c); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	// A commit whose WAL fills a page wakes the WAL writer at once: then
	// there is no window to look in, and the test tries again.
	for attempt := 0; attempt < 10; attempt++ {
		if asyncAttempt(t, s, c, oc, conn) {
			return
		}
	}
	t.Fatal("the WAL writer wrote every asynchronous commit before the collections: the test proves nothing")
}

// asyncAttempt confirms the slot up to the flushed position, commits one
// row asynchronously on conn and collects. It returns false when the
// row's WAL was written before the collections were done.
func asyncAttempt(t *testing.T, s *server, c *Collector, oc *outbox.Collector, conn *pgxpool.Conn) bool {
	t.Helper()
	ctx := context.Background()
	var confirmed, inserted string
	if err := conn.QueryRow(ctx, `SELECT pg_replication_slot_advance('async', pg_current_wal_flush_lsn())::text`).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `INSERT INTO outbox (payload) VALUES ('async') RETURNING pg_current_wal_insert_lsn()::text`).Scan(&inserted); err != nil {
		t.Fatal(err)
	}
	m, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	pending, _, err := outboxReading(t, oc)
	if err != nil {
		t.Fatal(err)
	}
	var unwritten bool
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() <= $1::text::pg_lsn`, inserted).Scan(&unwritten); err != nil {
		t.Fatal(err)
	}
	if !unwritten {
		return false
	}
	if pending != 1 || m.get(t, "outbox_cdc_slot_lag_bytes", "orders") == 0 {
		t.Errorf("a committed row whose WAL is not yet written: %v pending, lag %v bytes %v s; want it pending (slot %s, the row's WAL before %s)",
			pending, m.get(t, "outbox_cdc_slot_lag_bytes", "orders"), m.get(t, "outbox_cdc_slot_lag_seconds", "orders"), confirmed, inserted)
	}
	return true
}
