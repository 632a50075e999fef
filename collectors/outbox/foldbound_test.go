package outbox

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// foldBoundedCheck checks FoldBoundedQuery against the brute-force
// oldest row per series (want) on runFoldSeed's rows and caps: for the
// series holding "other", grouped by first value as queueUnfound groups
// them, with a seeded entry limit (often below the rows there are). Each
// row returned folds into its target. When the count says every entry
// was read, each target reads exactly its oldest row, or nothing when it
// has none; when the read stopped early, a row read is never older than
// the target's oldest (a lower bound), and a read by time that met a
// target read its oldest exactly.
func foldBoundedCheck(ctx context.Context, t *testing.T, env *oracleEnv, spec *boundSpec, pc *SeriesCap, want map[string]float64, r *rand.Rand) {
	t.Helper()
	f := labelFold(pc)
	byFirst := map[string][][]string{}
	for _, target := range pc.Targets() {
		if !slices.Contains(target, Other) {
			continue
		}
		first := Other
		if len(target) > 1 && target[0] != "" {
			first = target[0]
		}
		byFirst[first] = append(byFirst[first], target)
	}
	for first, targets := range byFirst {
		limit := 1 + r.IntN(120)
		q, count := spec.FoldBoundedQuery(f, targets, first, -1, limit)
		if q == "" {
			t.Fatalf("no bounded read of %q", targets)
		}
		var entries int64
		if err := env.pool.QueryRow(ctx, count, pgx.QueryExecModeSimpleProtocol).Scan(&entries); err != nil {
			t.Fatalf("%v\n%s", err, count)
		}
		got := map[string]float64{}
		for _, g := range boundedGroups(ctx, t, env, spec, q) {
			k := foldKey(pc, g.labels)
			if !slices.ContainsFunc(targets, func(x []string) bool { return joinLabels(x) == k }) {
				t.Errorf("bounded read of %q: a row of %q", targets, k)
			}
			if _, dup := got[k]; dup {
				t.Errorf("bounded read of %q: two rows of %q", targets, k)
			}
			got[k] = g.age
		}
		complete, ranged := entries <= int64(limit), first != Other
		for _, target := range targets {
			k := joinLabels(target)
			w, ok := want[k]
			g, read := got[k]
			switch {
			case read && !ok:
				t.Errorf("bounded read (limit %d, first %q): %q has no row, read one aged %v", limit, first, target, g)
			case read && g > w+ageTolerance:
				t.Errorf("bounded read (limit %d, first %q): %q read %v, older than its oldest row %v", limit, first, target, g, w)
			case complete && (ok != read || ok && math.Abs(g-w) > ageTolerance):
				t.Errorf("bounded read (limit %d of %d entries, first %q): %q read %v (%v), want %v (%v)", limit, entries, first, target, g, read, w, ok)
			case !ranged && read && math.Abs(g-w) > ageTolerance:
				t.Errorf("bounded read by time (limit %d): %q met at %v, want its oldest %v", limit, target, g, w)
			}
		}
	}
}

// boundedGroups runs one bounded read.
func boundedGroups(ctx context.Context, t *testing.T, env *oracleEnv, spec *boundSpec, q string) []group {
	t.Helper()
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
