package outbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
)

// pastRead is what the read by time past the per combination skip-scan
// (coverPast) left to do: need when the skip-scan stopped after
// MaxOldestTuples combinations; full when that read stopped at its
// max_count rows (or could not run), so that rows of the combinations
// nobody reached may hide behind them; since, the age in seconds before
// which it read every such row (the youngest oldest age among its
// groups; -1 when it could not run, and nothing is known).
type pastRead struct {
	need, full bool
	since      float64
}

// ageSlack absorbs the rounding of ages read by different queries (each
// takes the read time anew): a series is taken as settled only when its
// oldest row is older than since by more, and the walks start earlier
// by as much.
const ageSlack = 0.001

// exactOther keeps every series' oldest age exact when the skip-scan
// stopped after MaxOldestTuples combinations and the read past it filled
// up: a few series of their own (a deadline override's value over many
// combinations, a series kept from earlier scrapes) can own more than
// max_count rows older than the oldest row of a series holding "other",
// whose rows then lie in combinations neither read reached. Each series
// whose oldest row so far is not older than what the read past the
// skip-scan covered is read once more: a combination of its own by its
// oldest row (one index range), the series holding "other" by one walk
// in time order that stops at the first row folding into each
// (FoldOldestQuery); a series holding "other" no read found a row of, by
// a read of bounded cost (queueUnfound). The fold is the one apply will
// make, on a copy of the series cap.
func (s *Sampler) exactOther(ctx context.Context, tx pgx.Tx, spec *boundSpec, r *read, p pastRead) error {
	if !p.need || !p.full {
		return nil
	}
	pc := s.cap.Clone()
	wm := s.wm.Clone()
	pc.Admit(s.combos(r, freshPublished(&wm, r)), time.UnixMicro(r.now))
	known, exact, overridden := s.knownOldest(spec, r, pc)
	settled := func(key string) bool { return p.since >= 0 && known[key] > p.since+ageSlack }
	readAll := func(v string) bool { return pc.Pinned(v) && overridden[v] < int64(s.o.MaxCount) }
	var probes, walks [][]string
	for _, t := range pc.Targets() {
		key := joinLabels(t)
		if settled(key) || len(t) > 0 && t[0] != Other && readAll(t[0]) {
			continue
		}
		if slices.Contains(t, Other) {
			walks = append(walks, t)
		} else if !exact[key] {
			probes = append(probes, t)
		}
	}
	b := &pgx.Batch{}
	if len(probes) > 0 {
		queueGroups(b, spec.ProbeQuery(probes, 1, true), spec, partProbeAge, &r.groups, "read the oldest rows of the label sets past the per label set read (capped)")
	}
	since := -1.0
	if p.since >= 0 {
		since = p.since + ageSlack
	}
	// A series a row was found of has its oldest row no later than that
	// one: their walk ends at the latest of them. The series no row was
	// found of are read with a bounded cost (boundUnfound).
	var found, unfound [][]string
	until := -1.0
	for _, t := range walks {
		a := known[joinLabels(t)]
		if a <= 0 {
			unfound = append(unfound, t)
			continue
		}
		if until < 0 || a-ageSlack < until {
			until = max(a-ageSlack, 0)
		}
		found = append(found, t)
	}
	f := labelFold(pc)
	if q := spec.FoldOldestQuery(f, found, since, until); q != "" {
		queueGroups(b, q, spec, partProbeAge, &r.groups, "read the oldest row of each series holding other past the per label set read (capped)")
	}
	// Those with "other" first are walked on from where the last walks
	// proved them empty (otherwalk.go); the others in their first
	// value's range (otherbound.go).
	var ranged, byTime [][]string
	for _, t := range unfound {
		if len(t) > 1 && t[0] != "" && t[0] != Other {
			ranged = append(ranged, t)
		} else {
			byTime = append(byTime, t)
		}
	}
	reads, limit := s.queueUnfound(b, spec, f, ranged, since, len(byTime) > 0)
	resumed := s.queueWalks(b, spec, f, pc, byTime, since, limit, r)
	if b.Len() == 0 {
		return nil
	}
	// Not prepared: the values are in the text.
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("read the oldest rows of the series past the per label set read: %w", err)
	}
	for _, u := range reads {
		r.groups = append(r.groups, u.got...)
		r.lowerBound = append(r.lowerBound, u.bounded(pc)...)
	}
	return s.settleWalks(ctx, tx, spec, r, pc, resumed)
}

// knownOldest folds what the sample read by pc: the oldest age found so
// far of each series, the combinations whose oldest row was read (those
// the reads in time order and the skip-scan met), and how many rows the
// overrides' read returned per value.
func (s *Sampler) knownOldest(spec *boundSpec, r *read, pc *SeriesCap) (known map[string]float64, exact map[string]bool, overridden map[string]int64) {
	known, exact, overridden = map[string]float64{}, map[string]bool{}, map[string]int64{}
	for _, g := range r.groups {
		if st := spec.Rules.Classify(g.facts); st == Ignored || st == Published || st == Dead {
			continue
		}
		key := foldKey(pc, g.labels)
		known[key] = max(known[key], g.age)
		switch g.part {
		case partOverride:
			overridden[g.labels[0]] += g.rows
			exact[joinLabels(g.labels)] = true
		case partWalk:
			exact[joinLabels(g.labels)] = true
		}
	}
	for _, x := range r.oldest {
		key := foldKey(pc, x.labels)
		known[key] = max(known[key], x.age)
		exact[joinLabels(x.labels)] = true
	}
	return known, exact, overridden
}

// labelFold is pc as FoldOldestQuery tests it in SQL.
func labelFold(pc *SeriesCap) outboxsql.LabelFold {
	f := outboxsql.LabelFold{Other: Other}
	for i, lc := range pc.cols {
		keep := slices.Collect(maps.Keys(lc.admitted))
		if i == 0 {
			keep = append(keep, slices.Collect(maps.Keys(lc.pinned))...)
			f.Pinned = slices.Sorted(maps.Keys(lc.pinned))
		}
		slices.Sort(keep)
		f.Keep = append(f.Keep, keep)
	}
	if pc.tuples != nil {
		for _, k := range slices.Sorted(maps.Keys(pc.tuples.admitted)) {
			f.Tuples = append(f.Tuples, strings.Split(k, "\xff"))
		}
	}
	return f
}
