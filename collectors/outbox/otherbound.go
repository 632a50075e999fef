package outbox

import (
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
)

// minUnfoundEntries is the fewest index entries a read of the series no
// row was found of may pass (boundUnfound), whatever max_count.
const minUnfoundEntries = 1000

// unfoundRead is one bounded read of series holding "other" no row was
// found of (FoldBoundedQuery): its targets, whether it reads a range of
// the first label value (not in time order), its entry limit, and what
// it returned.
type unfoundRead struct {
	targets [][]string
	ranged  bool
	limit   int
	entries int64
	got     []group
}

// queueUnfound queues on b the reads of unfound, the series holding
// "other" that no read found a row of: usually a combination kept from
// earlier scrapes whose rows were all published. Walking the oldest index
// to its end to prove a series has no row costs every entry past since
// (seconds in a backlog of millions, past statement_timeout at tens of
// millions), each scrape while the series is kept. So a series whose
// first value is not "other" is read in that value's range of the
// unpublished index (every row folding into it holds that value first:
// usually a few entries, or none), and the series with "other" first by
// time from since; each read passes at most its share of max_count
// entries (at least minUnfoundEntries). A read that stops there leaves
// the oldest age of its series a lower bound (bounded), which the
// collector logs.
func (s *Sampler) queueUnfound(b *pgx.Batch, spec *boundSpec, f outboxsql.LabelFold, unfound [][]string, since float64, walks bool) ([]*unfoundRead, int) {
	byFirst := map[string][][]string{}
	for _, t := range unfound {
		first := Other
		if len(t) > 1 && t[0] != "" {
			first = t[0]
		}
		byFirst[first] = append(byFirst[first], t)
	}
	shares := len(byFirst)
	if walks {
		shares++
	}
	limit := max(s.o.MaxCount/max(shares, 1), minUnfoundEntries)
	var reads []*unfoundRead
	for _, first := range slices.Sorted(maps.Keys(byFirst)) {
		q, count := spec.FoldBoundedQuery(f, byFirst[first], first, since, limit)
		if q == "" {
			continue
		}
		u := &unfoundRead{targets: byFirst[first], ranged: first != Other, limit: limit}
		queueGroups(b, q, spec, partProbeAge, &u.got, "read the oldest row of each series holding other no read found (capped)")
		b.Queue(count).QueryRow(func(row pgx.Row) error { return row.Scan(&u.entries) })
		reads = append(reads, u)
	}
	return reads, limit
}

// bounded returns the series of u whose oldest age is a lower bound: none
// when the read passed every entry; else those a range read covered in
// part, and those a read by time did not meet (their oldest row, if any,
// lies past the entries it read).
func (u *unfoundRead) bounded(pc *SeriesCap) [][]string {
	if u.entries <= int64(u.limit) {
		return nil
	}
	met := map[string]bool{}
	for _, g := range u.got {
		met[foldKey(pc, g.labels)] = true
	}
	var out [][]string
	for _, t := range u.targets {
		if key := joinLabels(t); u.ranged || !met[key] {
			out = append(out, t)
		}
	}
	return out
}
