package cdc

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// restartRig is one exporter start: the slot's collector and the linked
// outbox's.
type restartRig struct {
	c  *Collector
	oc *outbox.Collector
}

func startExporter(s *server, slot string) restartRig {
	c := newCollector(s, map[string]*config.CDC{"orders": {Database: "main", Slot: slot, Deadline: time.Minute}})
	return restartRig{c: c, oc: linkedOutbox(s, c, "orders")}
}

// reading is one scrape of a restartRig: the slot's series, the server
// sample they were measured at, the linked outbox's pending rows and
// oldest age, and the ids of its stuck rows.
type reading struct {
	m               metrics
	now             Sample
	pending, oldest float64
	stuck           map[string]bool
}

func (r restartRig) scrape(t *testing.T, s *server, slot string) reading {
	t.Helper()
	m, err := collect(t, r.c)
	if err != nil {
		t.Fatal(err)
	}
	h := r.c.History().Samples()
	out := reading{m: m, now: h[len(h)-1], stuck: map[string]bool{}}
	if out.pending, out.oldest, err = outboxReading(t, r.oc); err != nil {
		t.Fatal(err)
	}
	st, _ := r.c.Last("orders")
	rows, err := outbox.StuckBehind(context.Background(), s.ro, "outbox", linkedOutboxConfig(), outbox.MaxStuckRows,
		outbox.DefaultBehindLookback, outbox.Confirmed{At: st.ConfirmedAt, LowerBound: st.LowerBound, Slot: slot})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		out.stuck[row.ID] = true
	}
	return out
}

// A burst of WAL, the connector confirms it and stalls, 18 outbox rows
// are written, then the exporter restarts. The checkpoint before the
// burst is all the new exporter knows of the past: the slot reads from
// it, an upper bound that says so, never under the truth, and the 18 rows
// read pending and stuck at the first scrape and every one after. When a
// checkpoint falls after the rows, the next start has no sample older
// than the slot: the latest commit below the slot's catalog_xmin dates it
// instead, an upper bound that says so, with the time since the
// checkpoint as the least the lag can be, and the 18 rows still read
// pending and stuck. (Counting from the checkpoint alone read the lag
// under the truth and no row pending.)
func TestRestartAfterStallKeepsTheRowsPending(t *testing.T) {
	s := startCommitTSServer(t)
	s.exec(t, `SELECT pg_create_logical_replication_slot('stalled', 'test_decoding')`)
	s.exec(t, `CHECKPOINT`)
	s.exec(t, `INSERT INTO other (payload) SELECT repeat(md5(g::text), 30) FROM generate_series(1, 3000) g`)
	s.exec(t, `SELECT pg_replication_slot_advance('stalled', pg_current_wal_lsn())`)
	confirmed := s.position(t) // the position is still the confirmed one
	var ids []string
	for i := 0; i < 18; i++ {
		var id int64
		if err := s.admin.QueryRow(context.Background(), `INSERT INTO outbox (payload) VALUES ('e') RETURNING id`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, strconv.FormatInt(id, 10))
	}
	var firstCommit, firstCreated time.Time
	if err := s.admin.QueryRow(context.Background(),
		`SELECT pg_xact_commit_timestamp(xmin), created_at FROM outbox ORDER BY id LIMIT 1`).Scan(&firstCommit, &firstCreated); err != nil {
		t.Fatal(err)
	}
	rig := startExporter(s, "stalled")
	for round := 0; round < 3; round++ {
		r := rig.scrape(t, s, "stalled")
		lag, truth := r.m.get(t, "outbox_cdc_slot_lag_seconds", "orders"), r.now.At.Sub(firstCommit).Seconds()
		if lag < truth || r.m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders") != 1 || r.m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders") != 0 {
			t.Errorf("round %d after the restart: lag %vs (upper %v, lower %v); want at least the truth %vs, marked an upper bound", round, lag,
				r.m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders"), r.m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders"), truth)
		}
		if atLeast := r.m.get(t, "outbox_cdc_slot_lag_at_least_seconds", "orders"); atLeast > r.now.At.Sub(confirmed.At).Seconds() {
			t.Errorf("round %d after the restart: lag at least %vs, over the truth (under %vs)", round, atLeast, r.now.At.Sub(confirmed.At).Seconds())
		}
		if r.pending != 18 || r.oldest < r.now.At.Sub(firstCreated).Seconds() {
			t.Errorf("round %d after the restart: %v pending, oldest %vs; want the 18 rows, the oldest at least %vs old", round, r.pending, r.oldest, r.now.At.Sub(firstCreated).Seconds())
		}
		for _, id := range ids {
			if !r.stuck[id] {
				t.Fatalf("round %d after the restart: row %s is behind the slot but not stuck: %v", round, id, r.stuck)
			}
		}
		waitFor(t, "the next collection's second", 10*time.Second, func() (bool, string) {
			return s.position(t).At.Sub(r.now.At) > HistoryMinGap, ""
		})
	}
	// A checkpoint after the rows, then another start, out of the
	// checkpoint's second: the server keeps its time in whole seconds,
	// and within that second the lag it bounds can only read 0.
	s.exec(t, `CHECKPOINT`)
	var cp time.Time
	if err := s.admin.QueryRow(context.Background(), `SELECT checkpoint_time FROM pg_control_checkpoint()`).Scan(&cp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the checkpoint's second passes", 10*time.Second, func() (bool, string) {
		return s.position(t).At.After(cp.Add(1100 * time.Millisecond)), ""
	})
	rig = startExporter(s, "stalled")
	r := rig.scrape(t, s, "stalled")
	lag, atLeast := r.m.get(t, "outbox_cdc_slot_lag_seconds", "orders"), r.m.get(t, "outbox_cdc_slot_lag_at_least_seconds", "orders")
	if lag < r.now.At.Sub(firstCommit).Seconds() || r.m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders") != 1 || r.m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders") != 0 {
		t.Errorf("behind the last checkpoint: lag %vs (upper %v, lower %v); want at least the truth %vs, marked an upper bound", lag,
			r.m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders"), r.m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders"), r.now.At.Sub(firstCommit).Seconds())
	}
	if atLeast <= 0 || atLeast > r.now.At.Sub(confirmed.At).Seconds() {
		t.Errorf("behind the last checkpoint: lag at least %vs; want above 0 and at most the truth, under %vs", atLeast, r.now.At.Sub(confirmed.At).Seconds())
	}
	if r.pending != 18 || r.oldest < r.now.At.Sub(firstCreated).Seconds() {
		t.Errorf("behind the last checkpoint: %v pending, oldest %vs; want the 18 rows, the oldest at least %vs old", r.pending, r.oldest, r.now.At.Sub(firstCreated).Seconds())
	}
	for _, id := range ids {
		if !r.stuck[id] {
			t.Fatalf("behind the last checkpoint: row %s is behind the slot but not stuck: %v", id, r.stuck)
		}
	}
	// The connector resumes and confirms everything: nothing is behind,
	// and nothing says bound.
	s.exec(t, `SELECT pg_replication_slot_advance('stalled', pg_current_wal_lsn())`)
	r = rig.scrape(t, s, "stalled")
	if r.m.get(t, "outbox_cdc_slot_lag_seconds", "orders") != 0 || r.pending != 0 || len(r.stuck) != 0 ||
		r.m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders") != 0 || r.m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders") != 0 {
		t.Errorf("caught up: %v, %v pending, stuck %v", r.m, r.pending, r.stuck)
	}
}

// A slot behind the last checkpoint at a start reads an upper bound
// dated by a commit below its catalog_xmin; once the connector confirms a
// position the exporter's own collections bracket, the lag is exact
// again, nothing says bound, and only the row after that position is
// pending.
func TestBehindTheCheckpointIsExactOnceCovered(t *testing.T) {
	s := startCommitTSServer(t)
	s.exec(t, `SELECT pg_create_logical_replication_slot('stalled', 'test_decoding')`)
	s.exec(t, `INSERT INTO outbox (payload) SELECT 'e' FROM generate_series(1, 5)`)
	s.exec(t, `CHECKPOINT`)
	rig := startExporter(s, "stalled")
	first := rig.scrape(t, s, "stalled")
	if first.m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders") != 1 || first.pending != 5 {
		t.Fatalf("behind the checkpoint: %v, %v pending; want an upper bound and the 5 rows", first.m, first.pending)
	}
	s.exec(t, `INSERT INTO outbox (payload) VALUES ('after')`)
	waitFor(t, "the next collection's second", 10*time.Second, func() (bool, string) {
		return s.position(t).At.Sub(first.now.At) > HistoryMinGap, ""
	})
	rig.scrape(t, s, "stalled")
	// The connector confirms up to where the first collection saw the
	// server: the five rows, not the one after.
	s.exec(t, `SELECT pg_replication_slot_advance('stalled', $1::text::pg_lsn)`, first.now.LSN.String())
	if got := s.confirmed(t, "stalled"); got != first.now.LSN {
		t.Fatalf("slot advanced to %v, want %v", got, first.now.LSN)
	}
	r := rig.scrape(t, s, "stalled")
	lag, atLeast := r.m.get(t, "outbox_cdc_slot_lag_seconds", "orders"), r.m.get(t, "outbox_cdc_slot_lag_at_least_seconds", "orders")
	if r.m.get(t, "outbox_cdc_slot_lag_upper_bound", "orders") != 0 || r.m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders") != 0 ||
		lag != r.now.At.Sub(first.now.At).Seconds() || atLeast > lag {
		t.Errorf("covered by the exporter's collections: %v; want exact from the first collection, %vs", r.m, r.now.At.Sub(first.now.At).Seconds())
	}
	if r.pending != 1 || len(r.stuck) != 1 {
		t.Errorf("covered: %v pending, stuck %v; want the one row after the first collection", r.pending, r.stuck)
	}
}
