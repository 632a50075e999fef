package cdc

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

func TestIsBehind(t *testing.T) {
	at := time.Unix(1000, 0)
	before, after := at.Add(-time.Millisecond), at.Add(time.Millisecond)
	for _, tc := range []struct {
		commit *time.Time
		want   bool
	}{{nil, false}, {&before, false}, {&at, false}, {&after, true}} {
		if got := IsBehind(tc.commit, at); got != tc.want {
			t.Errorf("IsBehind(%v, %v) = %v", tc.commit, at, got)
		}
	}
}

// For an outbox that keeps its rows, the rows behind the slot are those
// committed after the time the slot confirmed. Seeded transactions of a
// few rows each are committed with the exporter collecting between them;
// the test plays the connector, advancing the slot to the end of one of
// them, and compares RowsBehind with (a) IsBehind applied to every row's
// commit time read by the test and (b) the truth, the transactions after
// that one, give or take the one the slot stopped at (the history's
// resolution is one collection).
func TestRowsBehindSlot(t *testing.T) {
	s := startServer(t, cdctest.Options{Settings: map[string]string{"track_commit_timestamp": "on"}})
	s.exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, tx int NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	s.exec(t, `CREATE INDEX ON outbox (created_at)`)
	o := &config.Outbox{Database: "main", Table: "public.outbox", ID: "id", CreatedAt: "created_at", Deadline: time.Minute}
	for seed := uint64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewPCG(seed, 18))
		s.exec(t, `TRUNCATE outbox`)
		slot := "rows_" + string(rune('a'+seed))
		s.exec(t, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot)
		c := newCollector(s, map[string]*config.CDC{"o": {Database: "main", Slot: slot, Deadline: time.Minute, Outbox: "outbox"}})
		c.hist = NewHistory(DefaultHistorySize, 0)
		const txs = 10
		rows := make([]int, txs)
		var post []LSN
		for j := 0; j < txs; j++ {
			rows[j] = 1 + r.IntN(4)
			s.exec(t, `INSERT INTO outbox (tx) SELECT $1 FROM generate_series(1, $2)`, j, rows[j])
			post = append(post, s.position(t).LSN)
			if _, err := collect(t, c); err != nil {
				t.Fatal(err)
			}
		}
		j := r.IntN(txs - 1)
		s.exec(t, `SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)`, slot, post[j].String())
		if _, err := collect(t, c); err != nil {
			t.Fatal(err)
		}
		st, _ := c.Last("o")
		got, err := RowsBehind(context.Background(), s.ro, o, st.ConfirmedAt, DefaultBehindLookback)
		if err != nil {
			t.Fatal(err)
		}
		// (a) The rule over every row.
		all, err := s.admin.Query(context.Background(), `SELECT tx, created_at, pg_xact_commit_timestamp(xmin) FROM outbox`)
		if err != nil {
			t.Fatal(err)
		}
		var want Behind
		for all.Next() {
			var (
				tx     int
				made   time.Time
				commit *time.Time
			)
			if err := all.Scan(&tx, &made, &commit); err != nil {
				t.Fatal(err)
			}
			if commit == nil {
				t.Fatalf("seed %d: no commit time with track_commit_timestamp on", seed)
			}
			if IsBehind(commit, st.ConfirmedAt) {
				want.Pending++
				if want.Oldest.IsZero() || made.Before(want.Oldest) {
					want.Oldest = made
				}
			}
		}
		if err := all.Err(); err != nil {
			t.Fatal(err)
		}
		if got.Pending != want.Pending || !got.Oldest.Equal(want.Oldest) {
			t.Errorf("seed %d: RowsBehind %+v, the rule over every row %+v", seed, got, want)
		}
		// (b) The truth: the transactions after j, and maybe j itself.
		after, atJ := 0, rows[j]
		for k := j + 1; k < txs; k++ {
			after += rows[k]
		}
		if got.Pending != int64(after) && got.Pending != int64(after+atJ) {
			t.Errorf("seed %d: slot at the end of transaction %d: %d rows behind, want %d (or %d)", seed, j, got.Pending, after, after+atJ)
		}
		if got.OldestAge(time.Now()) <= 0 {
			t.Errorf("seed %d: rows behind but no age", seed)
		}
	}
}
