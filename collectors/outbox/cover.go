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
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// cover completes the capped reads of the unpublished rows. The walk in
// time order (StateQuery) met the oldest row of every series it met a
// pending row of; a series it met none of, while rows were left past
// it, is read apart: an admitted combination by a probe of its own rows
// (one index range each), and a series folded into "other" (or partly)
// by the per combination skip-scan (PendingQuery), whose cost grows with
// the number of combinations. Nothing is read when the walk met every
// series: the usual case, since the series with the most rows and the
// oldest ones are those admitted first.
func (s *Sampler) cover(ctx context.Context, tx pgx.Tx, spec *boundSpec, r *read) error {
	if !r.walked {
		return nil
	}
	probes, fallback := s.uncovered(spec, r)
	b := &pgx.Batch{}
	var past pastRead
	if fallback {
		var err error
		if past, err = s.pendingSkipScan(ctx, tx, spec, r); err != nil {
			return err
		}
	} else {
		// Sent with the probes of the claimed rows, in one round trip:
		// which of those are needed does not depend on these.
		s.queuePendingProbes(b, spec, r, probes)
	}
	if err := s.coverClaimed(ctx, tx, spec, r, b); err != nil {
		return err
	}
	// Last: it folds what every read admits (otherexact.go).
	return s.exactOther(ctx, tx, spec, r, past)
}

// pendingSkipScan reads every combination of unpublished rows by the
// per combination skip-scan, when the walk missed a series folded into
// "other".
func (s *Sampler) pendingSkipScan(ctx context.Context, tx pgx.Tx, spec *boundSpec, r *read) (pastRead, error) {
	r.fallback = true
	b := &pgx.Batch{}
	queueGroups(b, spec.PendingQuery(), spec, partPending, &r.groups, "count pending rows per label set (capped)")
	if q := spec.OldestQuery(); q != "" {
		nl := len(s.o.Labels)
		b.Queue(q).Query(func(rows pgx.Rows) (err error) {
			if r.oldest, err = scanOldest(rows, nl); err != nil {
				return fmt.Errorf("find the oldest row per label set (capped): %w", err)
			}
			return nil
		})
	}
	if err := pg.SendBatch(ctx, tx, b); err != nil {
		return pastRead{}, err
	}
	return s.coverPast(ctx, tx, spec, r)
}

// queuePendingProbes queues on b the reads of probes, the combinations
// of unpublished rows the walk missed, one by one; b is sent unprepared
// (sendProbes).
func (s *Sampler) queuePendingProbes(b *pgx.Batch, spec *boundSpec, r *read, probes [][]string) {
	if len(probes) == 0 {
		return
	}
	k := max(s.o.MaxCount/len(probes), 1)
	r.follow(b, aheadRead{sql: spec.ProbeQuery(probes, k, false), probe: true}, spec, partProbe, &r.groups,
		"read the label sets the oldest rows missed (capped)")
	// The oldest row of each, claimed or not, for its age alone.
	r.follow(b, aheadRead{sql: spec.ProbeQuery(probes, 1, true), probe: true}, spec, partProbeAge, &r.groups,
		"read the oldest rows of the label sets the walk missed (capped)")
}

// sendProbes sends b, reads whose label values are in their text, which
// changes with them: not prepared.
func sendProbes(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("probe label sets: %w", err)
	}
	return nil
}

// coverPast completes the per combination skip-scan when it stopped
// after MaxOldestTuples combinations: the oldest rows of the combinations
// neither it nor the walk reached are read by time (OldestPastQuery), max_count of
// them, for their ages alone; what it leaves to do, when more than
// max_count rows of those combinations are older than a series' oldest
// row, is exactOther's.
func (s *Sampler) coverPast(ctx context.Context, tx pgx.Tx, spec *boundSpec, r *read) (pastRead, error) {
	if len(r.oldest) < outboxsql.MaxOldestTuples || spec.O.NoCreatedAt() {
		return pastRead{}, nil
	}
	seen := make([][]string, 0, len(r.oldest))
	for _, x := range r.oldest {
		seen = append(seen, x.labels)
	}
	for _, g := range r.groups {
		if g.part == partWalk {
			seen = append(seen, g.labels)
		}
	}
	q := spec.OldestPastQuery(seen, s.o.MaxCount)
	if q == "" {
		// Not read (an offsets table): nothing is known past the skip-scan.
		return pastRead{need: true, full: true, since: -1}, nil
	}
	var past []group
	b := &pgx.Batch{}
	queueGroups(b, q, spec, partProbeAge, &past, "read the oldest rows past the per label set read (capped)")
	// Not prepared: the values are in the text.
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return pastRead{}, fmt.Errorf("read the oldest rows past the per label set read: %w", err)
	}
	r.groups = append(r.groups, past...)
	p := pastRead{need: true, since: -1}
	var n int64
	for _, g := range past {
		n += g.rows
		if p.since < 0 || g.age < p.since {
			p.since = g.age
		}
	}
	p.full = n >= int64(max(s.o.MaxCount, 1))
	return p, nil
}

// uncovered returns the combinations to probe and whether the skip-scan
// is needed, by folding what the sample read as apply will fold it (on
// copies of the series cap and the published watermark, so the sampler
// changes only if the sample succeeds).
func (s *Sampler) uncovered(spec *boundSpec, r *read) ([][]string, bool) {
	var walked int64
	for _, g := range r.groups {
		if g.part == partWalk {
			walked += g.rows
		}
	}
	if walked < int64(s.o.MaxCount) {
		// The walk read every unpublished row.
		return nil, false
	}
	pc := s.cap.Clone()
	wm := s.wm.Clone()
	pc.Admit(s.combos(r, freshPublished(&wm, r)), time.UnixMicro(r.now))
	r.admitted = pc
	// A series the walk met a row of has its oldest row among them; one
	// it met a pending row of has its pending rows counted.
	met, metPending := map[string]bool{}, map[string]bool{}
	overridden := map[string]int64{}
	for i := range r.groups {
		g := &r.groups[i]
		if g.part != partOverride && g.part != partWalk {
			continue
		}
		if g.part == partOverride {
			overridden[g.labels[0]] += g.rows
		}
		key := r.fold(g)
		met[key] = true
		if spec.Rules.Classify(g.facts) == Pending {
			metPending[key] = true
		}
	}
	// An override's read that returned fewer than max_count rows read all
	// the rows of its value.
	readAll := func(v string) bool { return overridden[v] < int64(s.o.MaxCount) }
	return coverTargets(pc, met, metPending, readAll)
}

// fold returns the key of the series r.admitted folds g into, and keeps
// it in g: when the sample ends with that cap (apply), gauges does not
// fold g again.
func (r *read) fold(g *group) string {
	if !g.hasFold {
		g.folded, g.key = r.admitted.FoldKey(g.labels)
		g.hasFold = true
	}
	return g.key
}

// coverTargets decides, for the series a cap can fold rows into, those
// the walk met no row or no pending row of: a combination of admitted
// values is probed; a series holding "other" needs the skip-scan, unless
// its first value has a deadline override whose own read returned all
// its rows (readAll: the series then has no row the reads missed).
func coverTargets(pc *SeriesCap, met, metPending map[string]bool, readAll func(string) bool) (probes [][]string, fallback bool) {
	for _, t := range pc.Targets() {
		if k := joinLabels(t); met[k] && metPending[k] {
			continue
		}
		folded := slices.Contains(t, Other)
		switch {
		case len(t) > 0 && t[0] != Other && pc.Pinned(t[0]) && folded && readAll(t[0]):
		case folded:
			fallback = true
		default:
			probes = append(probes, t)
		}
	}
	return probes, fallback
}

// Targets are the series label values rows can fold into: every
// admitted combination (or value, with one label), the pinned first
// values with "other" after them, and "other" throughout; one empty
// series without labels. Sorted.
func (c *SeriesCap) Targets() [][]string {
	n := len(c.cols)
	if n == 0 {
		return [][]string{{}}
	}
	keys := map[string]bool{}
	add := func(vals []string) { keys[joinLabels(vals)] = true }
	others := func(first string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = Other
		}
		out[0] = first
		return out
	}
	add(others(Other))
	for p := range c.cols[0].pinned {
		add(others(p))
	}
	if c.tuples == nil {
		for v := range c.cols[0].admitted {
			add([]string{v})
		}
	} else {
		for k := range c.tuples.admitted {
			keys[k] = true
		}
	}
	var out [][]string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		out = append(out, strings.Split(k, "\xff"))
	}
	return out
}

// Pinned reports whether v, a first label value, always keeps its own
// series.
func (c *SeriesCap) Pinned(v string) bool { return len(c.cols) > 0 && c.cols[0].Pinned(v) }

// Clone returns a copy of c that admits apart from it.
func (c *SeriesCap) Clone() *SeriesCap {
	out := &SeriesCap{}
	for _, lc := range c.cols {
		out.cols = append(out.cols, lc.clone())
	}
	if c.tuples != nil {
		out.tuples = c.tuples.clone()
	}
	return out
}

func (c *LabelCap) clone() *LabelCap {
	return &LabelCap{Max: c.Max, admitted: maps.Clone(c.admitted), pinned: c.pinned}
}
