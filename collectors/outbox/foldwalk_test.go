package outbox

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// TestFoldOldestQueryOracle checks the fold FoldOldestQuery makes in SQL
// against the series cap's own Fold: for seeded random rows (NULLs, empty
// strings, "other" as a real value, quotes, an integer label) and
// seeded random caps (one to three labels, pinned first values, values
// and combinations admitted in two rounds), the query for each series
// must return exactly the oldest row that Fold puts into that series,
// and nothing for a series no row folds into; and so must one walk over
// every series at once.
func TestFoldOldestQueryOracle(t *testing.T) {
	env := newOracleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env.db.Exec(t, `CREATE TABLE fold (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL,
	  a text, b int, c text NOT NULL, status text NOT NULL DEFAULT 'PENDING')`)
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runFoldSeed(ctx, t, env, seed) })
	}
}

// foldRow is one generated row: its label values as the state-shaped
// queries read them (NULL as "") and its age.
type foldRow struct {
	vals []string
	age  float64
}

func runFoldSeed(ctx context.Context, t *testing.T, env *oracleEnv, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0xf01d))
	n := 1 + r.IntN(3)
	o := obDefaults(&config.Outbox{Table: "public.fold", Status: "status", Pending: []string{"PENDING"},
		Published: []string{"PUBLISHED"}, MaxLabelValues: 1 + r.IntN(12)})
	for i, c := range []string{"a", "b", "c"}[:n] {
		o.Labels = append(o.Labels, config.Label{Name: fmt.Sprintf("l%d", i), Column: c})
	}
	texts := []string{"", "other", "x", "y", `o'q\z`, "zz"}
	pools := [][]string{texts, {"", "1", "2", "3"}, texts[1:]}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var rows []foldRow
	src := [][]any{}
	for i := 0; i < 60+r.IntN(200); i++ {
		x := foldRow{age: float64(1+r.IntN(100_000)) / 1000}
		db := []any{now.Add(-time.Duration(x.age * float64(time.Second))), nil, nil, "x"}
		for j := 0; j < 3; j++ {
			v := pools[j][r.IntN(len(pools[j]))]
			if j < n {
				x.vals = append(x.vals, v)
			}
			switch {
			case v == "" && j < 2 && r.IntN(2) == 0:
				if j == 0 {
					db[1] = "" // an empty string, read as "" like NULL
				}
			case v == "":
			case j == 1:
				var k int
				fmt.Sscan(v, &k)
				db[2] = k
			default:
				db[1+j] = v
			}
		}
		rows = append(rows, x)
		src = append(src, db)
	}
	admin := env.db.Admin
	if _, err := admin.Exec(ctx, "TRUNCATE fold"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CopyFrom(ctx, pgx.Identifier{"fold"}, []string{"created_at", "a", "b", "c"}, pgx.CopyFromRows(src)); err != nil {
		t.Fatal(err)
	}
	spec, err := openSpec(ctx, env.pool, "fold", o, 0)
	if err != nil {
		t.Fatal(err)
	}
	var pinned []string
	for _, v := range texts {
		if r.IntN(4) == 0 {
			pinned = append(pinned, v)
		}
	}
	pc := NewSeriesCap(n, o.MaxLabelValues, pinned)
	for round := 0; round < 2; round++ {
		var combos []Combo
		for i := 0; i < 1+r.IntN(8); i++ {
			x := rows[r.IntN(len(rows))]
			combos = append(combos, Combo{Values: x.vals, Rows: int64(1 + r.IntN(5)), OldestAge: x.age})
		}
		pc.Admit(combos, now.Add(time.Duration(round)*time.Minute))
	}
	want := map[string]float64{}
	for _, x := range rows {
		k := foldKey(pc, x.vals)
		want[k] = math.Max(want[k], x.age)
	}
	f := labelFold(pc)
	for _, target := range pc.Targets() {
		key := joinLabels(target)
		got := foldOldest(ctx, t, env, spec, f, target)
		for _, g := range got {
			if k := foldKey(pc, g.labels); k != key {
				t.Errorf("%d labels, fold %+v: the read of %q returned a row of %q", n, f, target, g.labels)
			}
		}
		w, ok := want[key]
		switch {
		case !ok && len(got) > 0:
			t.Errorf("%d labels, fold %+v: %q has no row, read %d", n, f, target, len(got))
		case ok && (len(got) != 1 || math.Abs(got[0].age-w) > ageTolerance):
			t.Errorf("%d labels, fold %+v: %q read %+v, want one row aged %v", n, f, target, got, w)
		}
	}
	foldOldestAll(ctx, t, env, spec, pc, want)
	foldBoundedCheck(ctx, t, env, spec, pc, want, r)
}

// foldOldestAll checks one walk over every target of pc at once: each
// series that has a row gets exactly its oldest, in one row.
func foldOldestAll(ctx context.Context, t *testing.T, env *oracleEnv, spec *boundSpec, pc *SeriesCap, want map[string]float64) {
	t.Helper()
	targets := pc.Targets()
	gs := foldOldestOf(ctx, t, env, spec, labelFold(pc), targets)
	got := map[string]float64{}
	for _, g := range gs {
		k := foldKey(pc, g.labels)
		if _, dup := got[k]; dup {
			t.Errorf("one walk over %d series: two rows of %q", len(targets), k)
		}
		got[k] = g.age
	}
	for _, target := range targets {
		k := joinLabels(target)
		w, ok := want[k]
		if g, read := got[k]; ok != read || ok && math.Abs(g-w) > ageTolerance {
			t.Errorf("one walk over %d series: %q read %v (%v), want %v (%v)", len(targets), target, g, read, w, ok)
		}
	}
}

// foldOldest runs FoldOldestQuery for one target.
func foldOldest(ctx context.Context, t *testing.T, env *oracleEnv, spec *boundSpec, f outboxsql.LabelFold, target []string) []group {
	t.Helper()
	return foldOldestOf(ctx, t, env, spec, f, [][]string{target})
}

// foldOldestOf runs FoldOldestQuery for targets, from the first entry to
// the last.
func foldOldestOf(ctx context.Context, t *testing.T, env *oracleEnv, spec *boundSpec, f outboxsql.LabelFold, targets [][]string) []group {
	t.Helper()
	q := spec.FoldOldestQuery(f, targets, -1, -1)
	if q == "" {
		return nil
	}
	rows, err := env.pool.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	gs, err := scanGroups(rows, spec, 0)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	return slices.DeleteFunc(gs, func(g group) bool { return g.rows == 0 })
}

// TestFoldOldestQueryOffsets runs the walk on an outbox read through an
// offsets table (each message once per consumer group that has not
// acked it; the group is a label): the oldest message each group's
// series has not consumed, and "other" the oldest of the groups folded
// into it. The tables have the columns watermill-sql's default
// PostgreSQL schema and offsets adapter give them (the columns the
// queries read, no more).
func TestFoldOldestQueryOffsets(t *testing.T) {
	env := newOracleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env.db.Exec(t, `CREATE TABLE watermill_orders ("offset" bigserial PRIMARY KEY, uuid varchar(36) NOT NULL,
	    created_at timestamp NOT NULL, payload json, metadata json, transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id());
	  CREATE TABLE watermill_offsets_orders (consumer_group varchar(255) NOT NULL PRIMARY KEY,
	    offset_acked bigint, last_processed_transaction_id xid8 NOT NULL, offset_consumed bigint);
	  INSERT INTO watermill_orders (uuid, created_at) SELECT i::text, '2030-01-01'::timestamp - i * interval '1 minute'
	    FROM generate_series(10, 1, -1) i;
	  INSERT INTO watermill_offsets_orders SELECT 'g' || k, o."offset", o.transaction_id, o."offset"
	    FROM generate_series(1, 4) k JOIN watermill_orders o ON o."offset" = 2 * k;
	`)
	o := obDefaults(&config.Outbox{Table: "public.watermill_orders", OffsetsTable: "public.watermill_offsets_orders",
		ID: "offset", CreatedAt: "created_at", TimeZone: "UTC",
		Labels: []config.Label{{Name: "consumer_group", Column: config.OffsetsGroupColumn}}, MaxLabelValues: 1})
	spec, err := openSpec(ctx, env.pool, "orders", o, 0)
	if err != nil {
		t.Fatal(err)
	}
	// g1 acked message 2 (created 9 minutes before now), so its oldest
	// is message 3 (8 minutes); g2..g4 acked 4, 6, 8: "other" holds g2's
	// message 5 (6 minutes) as its oldest.
	pc := NewSeriesCap(1, 1, nil)
	pc.Admit([]Combo{{Values: []string{"g1"}, Rows: 9}}, time.Now())
	got := map[string]float64{}
	for _, g := range foldOldestOf(ctx, t, env, spec, labelFold(pc), pc.Targets()) {
		got[foldKey(pc, g.labels)] = g.age
	}
	if len(got) != 2 || math.Abs(got["g1"]-480) > ageTolerance || math.Abs(got[Other]-360) > ageTolerance {
		t.Errorf("oldest per series %v, want g1 480 s and other 360 s", got)
	}
}
