package cdc

import (
	"context"
	"testing"
	"time"
)

// A slot behind the whole history (after a start, behind the last
// checkpoint): without a commit time it reads the time since the
// checkpoint, a lower bound; with one from before its position it reads
// the time since that commit, an upper bound, and the least lag is still
// the time since the checkpoint. A commit time that is not earlier than
// the history's answer says nothing more and is not used. Every answer's
// least lag is never over its lag, and 0 when caught up.
func TestAssessBracketsASlotOlderThanTheHistory(t *testing.T) {
	h := NewHistory(8, 0)
	h.Add(ms(100_000), 9000)
	h.SeedRange(ms(40_000), ms(41_000), 5000) // the last checkpoint
	now := Sample{At: ms(100_000), LSN: 9000}
	slot := SlotRow{Name: "s", Exists: true, Type: "logical", ConfirmedFlush: ptrLSN(3000)}
	st, err := Assess(now, slot, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.LowerBound || st.UpperBound || !st.OlderThanHistory || st.LagSeconds != 59 || st.LagAtLeast != 59 || !st.ConfirmedAt.Equal(ms(41_000)) {
		t.Errorf("behind the checkpoint, no commit time: %+v; want a lower bound of 59s from the checkpoint's second", st)
	}
	before := ms(10_000)
	st, err = Assess(now, slot, h, &before)
	if err != nil {
		t.Fatal(err)
	}
	if st.LowerBound || !st.UpperBound || !st.OlderThanHistory || st.LagSeconds != 90 || st.LagAtLeast != 59 || !st.ConfirmedAt.Equal(before) {
		t.Errorf("behind the checkpoint, a commit 90s ago: %+v; want an upper bound of 90s, at least 59s, confirmed at the commit", st)
	}
	late := ms(50_000)
	if st, _ = Assess(now, slot, h, &late); !st.LowerBound || st.LagSeconds != 59 {
		t.Errorf("a commit time after the checkpoint's: %+v; want it unused, the lower bound kept", st)
	}
	// Within the history the commit time changes nothing.
	slot.ConfirmedFlush = ptrLSN(7000)
	st, err = Assess(now, slot, h, &before)
	if err != nil {
		t.Fatal(err)
	}
	if st.LowerBound || !st.UpperBound || st.OlderThanHistory || st.LagSeconds != 60 || st.LagAtLeast != 0 || !st.ConfirmedAt.Equal(ms(40_000)) {
		t.Errorf("between the checkpoint and the first collection: %+v; want an upper bound of 60s from the checkpoint, at least 0", st)
	}
	h.Add(ms(110_000), 9500)
	now = Sample{At: ms(120_000), LSN: 9800}
	h.Add(now.At, now.LSN)
	slot.ConfirmedFlush = ptrLSN(9600)
	if st, _ = Assess(now, slot, h, &before); st.LowerBound || st.UpperBound || st.LagSeconds != 10 || st.LagAtLeast != 0 || st.Resolution != 10*time.Second {
		t.Errorf("between the last two collections: %+v; want exact, 10s, at least 0", st)
	}
	slot.ConfirmedFlush = ptrLSN(9200)
	if st, _ = Assess(now, slot, h, &before); st.LagSeconds != 20 || st.LagAtLeast != 10 {
		t.Errorf("between the first two collections: %+v; want 20s, at least 10s", st)
	}
	slot.ConfirmedFlush = ptrLSN(9800)
	if st, _ = Assess(now, slot, h, &before); st.LagSeconds != 0 || st.LagAtLeast != 0 || st.LowerBound || st.UpperBound {
		t.Errorf("caught up: %+v", st)
	}
}

// The latest commit time below a catalog_xmin: the ids just below it,
// counted back past the wraparound without asking the server about ids
// that are never a transaction's, and NULL (not an error) where no id in
// the window committed with a time.
func TestCommittedBefore(t *testing.T) {
	s := startCommitTSServer(t)
	ctx := context.Background()
	var xids []uint32
	var times []time.Time
	for i := 0; i < 3; i++ {
		var (
			x  uint32
			at time.Time
		)
		tx, err := s.admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, `INSERT INTO other (payload) VALUES ('x') RETURNING xmin::text::bigint`).Scan(&x); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.admin.QueryRow(ctx, `SELECT pg_xact_commit_timestamp($1::bigint::text::xid)`, int64(x)).Scan(&at); err != nil {
			t.Fatal(err)
		}
		xids, times = append(xids, x), append(times, at)
	}
	// An aborted transaction just below the next catalog_xmin: no time.
	tx, err := s.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var aborted uint32
	if err := tx.QueryRow(ctx, `INSERT INTO other (payload) VALUES ('x') RETURNING xmin::text::bigint`).Scan(&aborted); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		xmin   uint32
		window int
		want   time.Time
	}{
		{xids[1], 1, times[0]},
		{xids[2], 1, times[1]},
		{xids[2] + 1, CommitWindow, times[2]},
		{aborted + 1, CommitWindow, times[2]},
		{aborted + 1, 1, time.Time{}},
		// Around the wraparound: ids 2 down to 0 are skipped, the ones
		// before them (2^32-1, ...) have no time here.
		{3, CommitWindow, time.Time{}},
		{0, CommitWindow, time.Time{}},
	} {
		at, ok, err := CommittedBefore(ctx, s.ro, c.xmin, c.window)
		if err != nil {
			t.Fatalf("below %d: %v", c.xmin, err)
		}
		if ok != !c.want.IsZero() || !at.Equal(c.want) {
			t.Errorf("below %d, %d ids: %v (%v), want %v", c.xmin, c.window, at, ok, c.want)
		}
	}
}
