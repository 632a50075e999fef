package outbox

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// claimedWalk is the walk of one part of the claimed rows while more
// than max_count are claimed (outboxsql/claimedwalk.go): part is its
// condition, unknown whether it reads the claimed rows with an unknown
// result (whose groups count only those), groups what it read and
// probes what the reads of the series it missed read.
type claimedWalk struct {
	part    string
	unknown bool
	groups  []group
	probes  []group
	// met are the series (as admitted on a copy) the walk met a row of.
	met map[string]bool
}

func (w *claimedWalk) kind() part {
	if w.unknown {
		return partUnknown
	}
	return partClaimedCapped
}

// queueClaimedWalks queues the walk of each part of the claimed rows.
func queueClaimedWalks(b *pgx.Batch, spec *boundSpec, r *read) {
	r.claimed = nil
	for _, p := range spec.ClaimedParts() {
		r.claimed = append(r.claimed, claimedWalk{part: p})
	}
	if u := spec.ClaimedUnknownPart(); u != "" {
		r.claimed = append(r.claimed, claimedWalk{part: u, unknown: true})
	}
	k := spec.ClaimedBudget()
	for i := range r.claimed {
		w := &r.claimed[i]
		r.follow(b, aheadRead{sql: spec.ClaimedWalkQuery(w.part, k)}, spec, w.kind(), &w.groups, "walk the claimed rows (capped)")
	}
}

// coverClaimed completes the walks of the claimed rows, once the series
// cap admitted on a copy (r.admitted): a part the walk read to its end
// holds no other row; otherwise each series the walk met no row of is
// read apart, an admitted combination by a range of its own, a value
// with a deadline override (and "other" after it) by the range of that
// value, which must end within the budget. When a series is left (one
// folded into "other" that no walk met) the walks are dropped for the
// per combination skip-scans. b holds the probes of the unpublished
// rows (cover.go), sent with the probes of the claimed rows in one round
// trip.
func (s *Sampler) coverClaimed(ctx context.Context, tx pgx.Tx, spec *boundSpec, r *read, b *pgx.Batch) error {
	if len(r.claimed) == 0 {
		return sendProbes(ctx, tx, b)
	}
	k := spec.ClaimedBudget()
	// After the per combination read of the pending rows, the sample
	// admits from everything it read (apply.go), not as decided here.
	fallback := r.admitted == nil || r.fallback
	type need struct {
		combos [][]string
		firsts []string
	}
	needs := make([]need, len(r.claimed))
	// cb holds the probes not read ahead; probed is set when any probe
	// was queued or taken.
	cb := &pgx.Batch{}
	probed := false
	for i := range r.claimed {
		w := &r.claimed[i]
		if fallback {
			break
		}
		if total(w.groups) <= int64(k) {
			// The walk read every row of its part.
			continue
		}
		w.met = map[string]bool{}
		for j := range w.groups {
			w.met[r.fold(&w.groups[j])] = true
		}
		var unmet [][]string
		for _, t := range r.admitted.Targets() {
			if w.met[joinLabels(t)] {
				continue
			}
			unmet = append(unmet, t)
			if len(t) > 1 && t[0] != Other && r.admitted.Pinned(t[0]) && !slices.Contains(needs[i].firsts, t[0]) {
				needs[i].firsts = append(needs[i].firsts, t[0])
			}
		}
		for _, t := range unmet {
			switch {
			case len(t) > 1 && slices.Contains(needs[i].firsts, t[0]):
				// Read with all the rows of its first value.
			case !slices.Contains(t, Other):
				needs[i].combos = append(needs[i].combos, t)
			default:
				fallback = true
			}
		}
		if q := spec.ClaimedProbeQuery(needs[i].combos, needs[i].firsts, w.part, k); q != "" && !fallback {
			probed = true
			r.follow(cb, aheadRead{sql: q, probe: true}, spec, w.kind(), &w.probes, "read the claimed rows of the label sets the walks missed (capped)")
		}
	}
	if !fallback {
		b.QueuedQueries = append(b.QueuedQueries, cb.QueuedQueries...)
	}
	if err := sendProbes(ctx, tx, b); err != nil {
		return err
	}
	if !fallback && probed {
		for i := range r.claimed {
			if !s.firstsCovered(r.admitted, &r.claimed[i], needs[i].firsts, k) {
				fallback = true
			}
		}
	}
	if fallback {
		return s.claimedSkipScan(ctx, tx, spec, r)
	}
	r.addClaimed()
	return nil
}

// addClaimed adds what the walks of the claimed rows and their probes
// read to the sample's groups, growing them once.
func (r *read) addClaimed() {
	n := 0
	for _, w := range r.claimed {
		n += len(w.groups) + len(w.probes)
	}
	r.groups = slices.Grow(r.groups, n)
	for _, w := range r.claimed {
		r.groups = append(append(r.groups, w.groups...), w.probes...)
	}
}

// metClaimed are the series, as pc folds them, that groups hold a row of.
func (s *Sampler) metClaimed(pc *SeriesCap, groups []group) map[string]bool {
	met := map[string]bool{}
	for _, g := range groups {
		met[foldKey(pc, g.labels)] = true
	}
	return met
}

// firstsCovered keeps, of the reads of the values firsts (w.probes),
// the rows of the series the walk missed (the others' rows it may have
// read already), and reports whether they leave none of those unread:
// each series of a value was met, or every row of the value was read.
func (s *Sampler) firstsCovered(pc *SeriesCap, w *claimedWalk, firsts []string, k int) bool {
	rows := map[string]int64{}
	kept := w.probes[:0:0]
	for _, g := range w.probes {
		if len(g.labels) > 0 && slices.Contains(firsts, g.labels[0]) {
			rows[g.labels[0]] += g.rows
		}
		if !w.met[foldKey(pc, g.labels)] {
			kept = append(kept, g)
		}
	}
	w.probes = kept
	met := s.metClaimed(pc, kept)
	for _, t := range pc.Targets() {
		if len(t) < 2 || !slices.Contains(firsts, t[0]) || w.met[joinLabels(t)] || met[joinLabels(t)] {
			continue
		}
		if rows[t[0]] > int64(k) {
			return false
		}
	}
	return true
}

// claimedSkipScan reads the claimed rows per label combination (a
// skip-scan of the claimed index by label), whose cost grows with the
// number of combinations: the fallback when the walks cannot cover every
// series.
func (s *Sampler) claimedSkipScan(ctx context.Context, tx pgx.Tx, spec *boundSpec, r *read) error {
	b := &pgx.Batch{}
	queueGroups(b, spec.ClaimedCappedQuery(), spec, partClaimedCapped, &r.groups, "count claimed rows (capped)")
	if q := spec.ClaimedUnknownQuery(); q != "" {
		queueGroups(b, q, spec, partUnknown, &r.groups, "count unknown results of claimed rows (capped)")
	}
	return pg.SendBatch(ctx, tx, b)
}
