package outbox

// The oracle of a drained series: TestOracleOtherExact's states (past
// every cap, the read past the skip-scan filled up), where after the
// first collection every row of one series holding "other" is published
// (a backlog draining). The series stays kept, and no read finds a row
// of it: the read that proves it empty must stay bounded, and every
// series must still read its exact oldest age. A series whose first
// value is its own is read in that value's range, completely: it is
// never reported a lower bound (one read by time, among more entries
// than its read may pass, is, once); and a row of it written again, the
// youngest of all, is read at once with its exact age.
//
//	go test -run OracleOtherUnfound ./collectors/outbox/ -other-seeds 12

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOracleOtherUnfound(t *testing.T) {
	env := newOracleEnv(t)
	runSeeds(t, "OracleOtherUnfound", nil, max(*otherSeeds, 3), func(t *testing.T, seed uint64) { runOtherUnfoundSeed(t, env, seed) })
}

// drainTarget picks the series to drain: one holding "other" with a
// first value of its own not pinned (read in that value's range), the
// last in index order (the likeliest past the skip-scan's combinations),
// when there is one, else one with "other" first and a value of its own
// after (read by time); never ("other", "other") nor a deadline
// override's.
func drainTarget(targets [][]string, pinned func(string) bool) []string {
	var ranged, byTime []string
	for _, t := range targets {
		switch {
		case !slices.Contains(t, Other) || t[0] != Other && pinned(t[0]) || !slices.ContainsFunc(t, func(v string) bool { return v != Other }):
		case t[0] != Other:
			if ranged == nil || t[0] > ranged[0] {
				ranged = t
			}
		case byTime == nil:
			byTime = t
		}
	}
	if ranged != nil {
		return ranged
	}
	return byTime
}

// drainNext moves the clock and adds fresh rows, none of them folding
// into drained (nil before the drain): unlike otherGen.next it publishes
// none, so that the fresh combinations stay past MaxOldestTuples and
// the reads past the skip-scan run at each step.
func drainNext(g *otherGen, rows []capsRow, s *Sampler, drained []string) []capsRow {
	for i := 0; i < 200+g.r.IntN(1000); i++ {
		x := capsRow{created: g.now.Add(-time.Duration(g.r.IntN(5000)) * time.Millisecond),
			et: g.value("ev", g.r.IntN(400)), topic: g.value("dest", g.r.IntN(80)), status: "PENDING"}
		if drained == nil || !slices.Equal(s.Fold([]string{x.et, x.topic}), drained) {
			rows = append(rows, x)
		}
	}
	return rows
}

func runOtherUnfoundSeed(t *testing.T, env *oracleEnv, seed uint64) {
	g := newOtherGen(seed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := env.db.Admin
	createCapsTable(ctx, t, admin)
	createIndexes(ctx, t, env, g.o)
	rows := g.initial()
	var logs bytes.Buffer
	c := NewCollector("ob", g.o, env.pool, slog.New(slog.NewTextHandler(&logs, nil)))
	var drained []string
	for step := 0; step < 3; step++ {
		if step > 0 {
			g.now = g.now.Add(time.Duration(5+g.r.IntN(60)) * time.Second)
			rows = drainNext(g, rows, c.sampler, drained)
		}
		if step == 1 {
			drained = drainTarget(c.sampler.cap.Targets(), c.sampler.cap.Pinned)
			if drained == nil {
				t.Fatalf("no series holding other to drain among %q", c.sampler.cap.Targets())
			}
			n := 0
			for i := range rows {
				if !rows[i].published && slices.Equal(c.sampler.Fold([]string{rows[i].et, rows[i].topic}), drained) {
					rows[i].published, rows[i].publishedTime = true, g.now
					n++
				}
			}
			t.Logf("drained %q: %d rows published", drained, n)
		}
		if step == 2 && drained[0] != Other {
			// One row again, the youngest of all: its series must read
			// its exact age at once.
			x := capsRow{created: g.now.Add(-time.Millisecond), et: drained[0], topic: "dest.99999", status: "PENDING"}
			if !slices.Equal(c.sampler.Fold([]string{x.et, x.topic}), drained) {
				t.Fatalf("%q folds into %q, not the drained series %q", []string{x.et, x.topic}, c.sampler.Fold([]string{x.et, x.topic}), drained)
			}
			rows = append(rows, x)
		}
		if err := capsWrite(ctx, admin, g.now, rows); err != nil {
			t.Fatal(err)
		}
		got := collect(t, c)
		capsCompare(t, step, g.capsGen, got, rows, c.sampler)
		if step > 0 && !slices.ContainsFunc(c.sampler.cap.Targets(), func(x []string) bool { return slices.Equal(x, drained) }) {
			t.Errorf("step %d: the drained series %q is no longer kept: the test reads no series no row is found of", step, drained)
		}
		if t.Failed() {
			return
		}
	}
	warns := strings.Count(logs.String(), "level=WARN")
	if warns > 1 {
		t.Errorf("the lower bound was logged %d times over 3 collections, want at most once per change:\n%s", warns, logs.String())
	}
	named := strings.Contains(logs.String(), "{"+strings.Join(drained, ",")+"}")
	if drained[0] != Other && named {
		t.Errorf("the drained series %q, read in its first value's range, was reported a lower bound:\n%s", drained, logs.String())
	}
	// Read by time, it is left unmet among more entries past the
	// skip-scan than its read may pass: its age (0) must be said to be
	// a lower bound, once.
	if drained[0] == Other && (warns != 1 || !named) {
		t.Errorf("the drained series %q, read by time, was reported a lower bound %d times, want once by name:\n%s", drained, warns, logs.String())
	}
}
