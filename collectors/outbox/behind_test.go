package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster/pgclustertest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

func TestIsBehind(t *testing.T) {
	at := time.Unix(1000, 0)
	before, after := at.Add(-time.Microsecond), at.Add(time.Microsecond)
	for _, tc := range []struct {
		commit *time.Time
		want   bool
	}{{nil, false}, {&before, false}, {&at, false}, {&after, true}} {
		if got := IsBehind(tc.commit, at); got != tc.want {
			t.Errorf("IsBehind(%v, %v) = %v", tc.commit, at, got)
		}
	}
}

// commitTS is a throwaway cluster with track_commit_timestamp = on (the
// shared test server runs without it), a superuser pool for fixtures and
// the exporter's read-only pool.
type commitTS struct {
	admin, ro *pgxpool.Pool
}

func startCommitTS(t *testing.T) *commitTS {
	t.Helper()
	c := pgclustertest.Start(t, "a cluster with track_commit_timestamp = on", func(ctx context.Context) (*pgcluster.Cluster, error) {
		return pgcluster.Start(ctx, pgcluster.Options{Prefix: "outbox-committs-pg-",
			Settings: map[string]string{"track_commit_timestamp": "on"}})
	})
	return &commitTS{admin: c.Admin, ro: c.ReadOnly(t, "postgres", 30*time.Second)}
}

func (s *commitTS) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := s.admin.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (s *commitTS) clock(t *testing.T) time.Time {
	t.Helper()
	var at time.Time
	if err := s.admin.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// behindOutbox is the CDC-published outbox of these tests: two label
// columns (region may be NULL), values beyond max_label_values folding
// into other, and a longer deadline for one kind.
func behindOutbox(table string) *config.Outbox {
	return obDefaults(&config.Outbox{Table: table, Labels: []config.Label{{Name: "kind", Column: "kind"}, {Name: "region", Column: "region"}},
		Deadline: time.Minute, Deadlines: map[string]time.Duration{"k0": 10 * time.Minute}, MaxLabelValues: 3})
}

// want is what one series should show, from every row of the table.
type want struct {
	pending               int64
	oldest                time.Time
	surelyLate, maybeLate int64 // past the deadline at the sample's start / end
}

// For an outbox a connector publishes from a slot, the pending series
// are the rows committed after the slot's confirmed time, per label set.
// Seeded histories of transactions (rows of random labels, some created
// long before they commit, past their deadline) are committed; the
// confirmed time is set at, between or before their commits; a sample is
// compared with the oracle: every row of the table read with its commit
// time (no lookback), judged by IsBehind and grouped by the sampler's
// own folding. Ages and past-deadline counts are bracketed by the server
// clock read before and after the sample, so no verdict depends on the
// machine's speed.
func TestBehindSlotOracle(t *testing.T) {
	s := startCommitTS(t)
	ctx := context.Background()
	var behind, confirmed int
	for seed := uint64(1); seed <= 4; seed++ {
		table := fmt.Sprintf("ob_%d", seed)
		r := rand.New(rand.NewPCG(seed, 18))
		commits := seedBehind(t, s, table, r)
		j := r.IntN(len(commits) - 1)
		at := commits[j] // at a commit: that transaction is published
		switch seed % 3 {
		case 1:
			at = commits[j].Add(commits[j+1].Sub(commits[j]) / 2)
		case 2:
			at = commits[0].Add(-time.Second) // nothing published yet
		}
		o := behindOutbox(table)
		smp := NewSampler(table, o)
		smp.PublishedBySlot(DefaultBehindLookback)
		before := s.clock(t)
		snap, err := smp.SampleBehind(ctx, s.ro, Confirmed{At: at})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		after := s.clock(t)
		wants, nb, nc := behindOracle(t, s, table, smp, at, before, after)
		behind, confirmed = behind+nb, confirmed+nc
		compareBehind(t, seed, wants, snap, before, after)
	}
	// The seeds must exercise both sides of the slot.
	if behind == 0 || confirmed == 0 {
		t.Fatalf("seeds gave %d rows behind and %d confirmed: they decide nothing", behind, confirmed)
	}
}

// seedBehind creates table and commits a dozen transactions of a few rows
// each, and returns each transaction's commit time.
func seedBehind(t *testing.T, s *commitTS, table string, r *rand.Rand) []time.Time {
	t.Helper()
	ctx := context.Background()
	s.exec(t, fmt.Sprintf(`CREATE TABLE %[1]s (id bigserial PRIMARY KEY, tx int NOT NULL, created_at timestamptz NOT NULL, kind text NOT NULL, region text);
		CREATE INDEX ON %[1]s (created_at); CREATE INDEX ON %[1]s (kind, region, created_at)`, table))
	const txs = 12
	for j := 0; j < txs; j++ {
		b := &pgx.Batch{}
		for k := 0; k < 1+r.IntN(6); k++ {
			var region any = []string{"eu", "us"}[r.IntN(2)]
			if r.IntN(5) == 0 {
				region = nil
			}
			// Fresh, past the minute, past k0's ten minutes: all well
			// inside the lookback.
			age := []time.Duration{time.Duration(r.IntN(20)) * time.Second, 2*time.Minute + time.Duration(r.IntN(60))*time.Second, 20 * time.Minute}[r.IntN(3)]
			b.Queue(`INSERT INTO `+table+` (tx, created_at, kind, region) VALUES ($1, clock_timestamp() - $2::interval, $3, $4)`,
				j, age.String(), fmt.Sprintf("k%d", r.IntN(6)), region)
		}
		if err := pgx.BeginFunc(ctx, s.admin, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }); err != nil {
			t.Fatal(err)
		}
	}
	commits := make([]time.Time, txs)
	rows, err := s.admin.Query(ctx, `SELECT tx, max(pg_xact_commit_timestamp(xmin)) FROM `+table+` GROUP BY tx`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			j  int
			at time.Time
		)
		if err := rows.Scan(&j, &at); err != nil {
			t.Fatal(err)
		}
		commits[j] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return commits
}

// behindOracle reads every row of table with its commit time and returns
// what each series should show, keyed by the sampler's folded labels, and
// how many rows are behind and confirmed.
func behindOracle(t *testing.T, s *commitTS, table string, smp *Sampler, at, before, after time.Time) (map[string]*want, int, int) {
	t.Helper()
	wants := map[string]*want{}
	var behind, confirmed int
	all, err := s.admin.Query(context.Background(), `SELECT kind, region, created_at, pg_xact_commit_timestamp(xmin) FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	for all.Next() {
		var (
			kind   string
			region *string
			made   time.Time
			commit *time.Time
		)
		if err := all.Scan(&kind, &region, &made, &commit); err != nil {
			t.Fatal(err)
		}
		if commit == nil {
			t.Fatalf("%s: a row without a commit time with track_commit_timestamp on", table)
		}
		if !IsBehind(commit, at) {
			confirmed++
			continue
		}
		behind++
		vals := strs([]*string{&kind, region})
		key := joinLabels(smp.Fold(vals))
		w := wants[key]
		if w == nil {
			w = &want{}
			wants[key] = w
		}
		w.pending++
		if w.oldest.IsZero() || made.Before(w.oldest) {
			w.oldest = made
		}
		d := Deadline(smp.o, vals)
		if made.Before(before.Add(-d)) {
			w.surelyLate++
		}
		if made.Before(after.Add(-d)) {
			w.maybeLate++
		}
	}
	if err := all.Err(); err != nil {
		t.Fatal(err)
	}
	return wants, behind, confirmed
}

// compareBehind compares a sample's series with the oracle's.
func compareBehind(t *testing.T, seed uint64, wants map[string]*want, snap *Snapshot, before, after time.Time) {
	t.Helper()
	got := map[string]Series{}
	for _, se := range snap.Series {
		got[joinLabels(se.Labels)] = se
	}
	for key, w := range wants {
		se, ok := got[key]
		if !ok {
			t.Errorf("seed %d: no series %q; want %+v", seed, key, *w)
			continue
		}
		if int64(se.Events[Pending]) != w.pending {
			t.Errorf("seed %d %q: pending %v, the oracle %d", seed, key, se.Events[Pending], w.pending)
		}
		lo, hi := before.Sub(w.oldest).Seconds()-1e-3, after.Sub(w.oldest).Seconds()+1e-3
		if se.OldestAge < lo || se.OldestAge > hi {
			t.Errorf("seed %d %q: oldest age %v, the oracle [%v, %v]", seed, key, se.OldestAge, lo, hi)
		}
		if int64(se.PastDeadline) < w.surelyLate || int64(se.PastDeadline) > w.maybeLate {
			t.Errorf("seed %d %q: past deadline %v, the oracle [%d, %d]", seed, key, se.PastDeadline, w.surelyLate, w.maybeLate)
		}
	}
	for key, se := range got {
		if wants[key] == nil && (se.Events[Pending] != 0 || se.OldestAge != 0 || se.PastDeadline != 0) {
			t.Errorf("seed %d %q: %+v, but no row of it is behind the slot", seed, key, se)
		}
	}
	if snap.Capped {
		t.Errorf("seed %d: capped", seed)
	}
}

// With more rows behind the slot than max_count, the counts are capped
// lower bounds read per label set, as for any outbox, and the oldest age
// stays exact: the capped reads carry the same condition.
func TestBehindSlotCapped(t *testing.T) {
	s := startCommitTS(t)
	ctx := context.Background()
	s.exec(t, `CREATE TABLE capped (id bigserial PRIMARY KEY, tx int NOT NULL, created_at timestamptz NOT NULL, kind text NOT NULL, region text);
		CREATE INDEX ON capped (created_at); CREATE INDEX ON capped (kind, region, created_at)`)
	// Published: old rows of k1; behind: 40 rows of k0 and k2.
	s.exec(t, `INSERT INTO capped (tx, created_at, kind, region) SELECT 0, clock_timestamp() - interval '30 minutes', 'k1', 'eu' FROM generate_series(1, 20)`)
	var confirmed time.Time
	if err := s.admin.QueryRow(ctx, `SELECT max(pg_xact_commit_timestamp(xmin)) FROM capped`).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	s.exec(t, `INSERT INTO capped (tx, created_at, kind, region) SELECT 1, clock_timestamp() - (g || ' seconds')::interval, CASE WHEN g % 2 = 0 THEN 'k0' ELSE 'k2' END, 'eu' FROM generate_series(1, 40) g`)
	o := behindOutbox("capped")
	o.MaxCount = 10
	smp := NewSampler("capped", o)
	smp.PublishedBySlot(DefaultBehindLookback)
	snap, err := smp.SampleBehind(ctx, s.ro, Confirmed{At: confirmed})
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Capped {
		t.Fatal("40 rows behind with max_count 10: not capped")
	}
	for _, se := range snap.Series {
		switch se.Labels[0] {
		case "k0", "k2":
			// The oldest behind: 40 s (k0, even) and 39 s (k2, odd).
			if se.Events[Pending] < 1 || se.Events[Pending] > 20 || se.OldestAge < 39 || se.OldestAge > 41+60 {
				t.Errorf("%v: pending %v (want 1..20), oldest %v (want about 40 s)", se.Labels, se.Events[Pending], se.OldestAge)
			}
		default:
			if se.Events[Pending] != 0 || se.OldestAge != 0 {
				t.Errorf("%v: %+v, but its rows are published", se.Labels, se)
			}
		}
	}
}

// Without track_commit_timestamp the exporter cannot tell the rows behind
// the slot from the published ones: a sample fails, naming the setting,
// whether or not a row lies in the range (an empty range would otherwise
// read 0 pending). The shared test server runs with it off.
func TestBehindSlotWithoutCommitTimestamp(t *testing.T) {
	db, pool, _ := obSetup(t, `CREATE TABLE q (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), kind text NOT NULL, region text)`)
	var track string
	if err := pool.QueryRow(context.Background(), `SHOW track_commit_timestamp`).Scan(&track); err != nil {
		t.Fatal(err)
	}
	if track != "off" {
		t.Fatalf("the shared test server has track_commit_timestamp %s; this test needs it off", track)
	}
	c := NewCollector("q", behindOutbox("q"), pool, testutil.Quiet())
	c.PublishedBySlot(func(context.Context) (Confirmed, error) {
		return Confirmed{At: time.Now().Add(-time.Minute)}, nil
	}, DefaultBehindLookback)
	for _, rows := range []int{0, 3} {
		db.Exec(t, fmt.Sprintf(`INSERT INTO q (kind) SELECT 'k0' FROM generate_series(1, %d)`, rows))
		ms, err := obTryScrape(c, 10*time.Second)
		if err == nil || !strings.Contains(err.Error(), "track_commit_timestamp is off") {
			t.Errorf("%d rows: err %v, want one naming track_commit_timestamp", rows, err)
		}
		if n := countNamed(ms, "outbox_events"); n != 0 {
			t.Errorf("%d rows: %d outbox_events series sent without a way to judge them", rows, n)
		}
	}
}

// When the slot's confirmed time is unknown (its collector has not read
// it, or failed), the outbox's collection fails with the source's error
// and sends no pending series: 0 would be a lie, every kept row a false
// page.
func TestBehindSlotUnknownFailsCollection(t *testing.T) {
	_, pool, _ := obSetup(t, `CREATE TABLE q (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), kind text NOT NULL, region text);
		INSERT INTO q (kind) VALUES ('k0')`)
	c := NewCollector("q", behindOutbox("q"), pool, testutil.Quiet())
	unknown := errors.New(`cdc "orders": replication slot "orders" does not exist`)
	c.PublishedBySlot(func(context.Context) (Confirmed, error) { return Confirmed{}, unknown }, DefaultBehindLookback)
	ms, err := obTryScrape(c, 10*time.Second)
	if !errors.Is(err, unknown) || !strings.Contains(err.Error(), `outbox "q"`) {
		t.Errorf("err %v, want the source's, naming the outbox", err)
	}
	if len(ms) != 0 {
		t.Errorf("%d metrics sent", len(ms))
	}
	// A sampler of a slot-published outbox refuses to sample without the
	// confirmed time, and one of a relay's outbox with it.
	if _, err := c.sampler.Sample(context.Background(), pool); err == nil {
		t.Error("Sample of a slot-published outbox worked without a confirmed time")
	}
	if _, err := NewSampler("r", behindOutbox("q")).SampleBehind(context.Background(), pool, Confirmed{At: time.Now()}); err == nil {
		t.Error("SampleBehind of a relay's outbox worked")
	}
}

func countNamed(ms []prometheus.Metric, name string) int {
	n := 0
	for _, m := range ms {
		if strings.Contains(m.Desc().String(), `"`+name+`"`) {
			n++
		}
	}
	return n
}

// A reload that links or unlinks the outbox to a slot starts its sampler
// afresh: the same rows mean another state; one that keeps the link keeps
// the sampler.
func TestBehindKeepState(t *testing.T) {
	src := func(context.Context) (Confirmed, error) { return Confirmed{At: time.Now()}, nil }
	linked := func() *Collector {
		c := NewCollector("q", behindOutbox("q"), nil, testutil.Quiet())
		c.PublishedBySlot(src, DefaultBehindLookback)
		return c
	}
	plain := NewCollector("q", behindOutbox("q"), nil, testutil.Quiet())
	if linked().KeepState(plain) || plain.KeepState(linked()) {
		t.Error("a sampler was kept across linking or unlinking the slot")
	}
	if !linked().KeepState(linked()) {
		t.Error("an unchanged link did not keep the sampler")
	}
}
