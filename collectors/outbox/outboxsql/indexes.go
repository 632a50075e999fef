package outboxsql

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Index is an index a query needs.
type Index struct {
	Name    string
	Columns []string
	Include []string
	Where   string
	// For names the queries the index serves.
	For string
}

// SQL is the statement that creates the index without blocking writes.
func (ix Index) SQL(table string) string {
	cols := make([]string, len(ix.Columns))
	for i, c := range ix.Columns {
		cols[i] = pg.Ident(c)
	}
	stmt := fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s)",
		pg.Ident(ix.Name), pg.Table(table), strings.Join(cols, ", "))
	if len(ix.Include) > 0 {
		inc := make([]string, len(ix.Include))
		for i, c := range ix.Include {
			inc[i] = pg.Ident(c)
		}
		stmt += " INCLUDE (" + strings.Join(inc, ", ") + ")"
	}
	if ix.Where != "" {
		stmt += " WHERE " + ix.Where
	}
	return stmt + ";"
}

// IndexName is a stable index name, outbox_exporter_<outbox>_<suffix>,
// shortened with a hash when it would pass PostgreSQL's 63 bytes.
func IndexName(outbox, suffix string) string {
	n := "outbox_exporter_" + outbox + "_" + suffix
	if len(n) <= 63 {
		return n
	}
	h := sha256.Sum256([]byte(n))
	tail := "_" + hex.EncodeToString(h[:4]) + "_" + suffix
	return n[:63-len(tail)] + tail
}

// Indexes are the indexes the outbox's queries need:
//
//   - unpublished: (labels..., created_at) over unpublished rows, with the
//     columns the state query reads included, so that the rows of one
//     label set are one range (the capped reads of a deadline override's
//     value and of a label set the oldest rows missed) and the fallback
//     skip-scans find each label combination's oldest rows directly;
//     without labels it is also the state query's index;
//   - oldest: (created_at) over unpublished rows, with labels, including
//     the label columns and what the state query reads: the state query
//     reads the oldest rows by time through it, an index-only scan,
//     whatever the number of label combinations;
//   - dead: (labels...) over dead rows;
//   - lease: (lease_until or claimed_at) over claimed unpublished rows, so
//     the expired and live leases are range reads and the claimed rows are
//     counted exactly while the pending ones are capped; "claimed" on
//     created_at when rows are claimed without a lease to judge;
//   - claimed_unknown: (lease_until, claimed_at or created_at) over the
//     claimed rows that may have an unknown result (an unknown status,
//     unknown_when, or an attempt made), for the walk of the claimed rows
//     with an unknown result while capped, which would otherwise filter
//     every passed lease;
//   - unknown: over unclaimed unpublished rows whose result is unknown by
//     a pending status or unknown_when, counted exactly while capped;
//   - unclassified: over rows with a NULL status or one listed nowhere;
//   - published_at: for the published counters' watermark;
//   - id: the lease fate lookup (usually the primary key serves it).
func (s *Spec) Indexes() map[string]Index {
	o := s.O
	out := map[string]Index{}
	var labels []string
	for _, l := range o.Labels {
		labels = append(labels, l.Column)
	}
	cc := claimColumn(o)
	include := func(key []string, cols ...string) []string {
		var inc []string
		for _, c := range cols {
			if c != "" && !slices.Contains(key, c) && !slices.Contains(inc, c) {
				inc = append(inc, c)
			}
		}
		return inc
	}
	r := s.rules("")
	up := r.unpublished()
	ukey := append(append([]string{}, labels...), s.OrderColumn())
	out["unpublished"] = Index{Name: IndexName(s.Name, "unpublished"), Columns: ukey,
		Include: include(ukey, append([]string{o.Status, o.LeaseUntil, o.ClaimedAt, o.Attempts}, orderInclude(o)...)...), Where: up,
		For: "the reads of one label set: deadline overrides, label sets the oldest rows missed, the per label set fallback (and without labels the state and stuck-row queries)"}
	if len(labels) > 0 {
		// Without labels the unpublished index is this one.
		// With the label columns and what the state decision reads
		// included: the state query is then an index-only scan of it.
		okey := []string{s.OrderColumn()}
		out["oldest"] = Index{Name: IndexName(s.Name, "oldest"), Columns: okey, Where: up,
			Include: include(okey, append(append([]string{}, labels...), append([]string{o.Status, o.LeaseUntil, o.ClaimedAt, o.Attempts}, orderInclude(o)...)...)...),
			For:     "the state query, which reads the oldest rows by time at any number of label combinations, and the stuck-row list"}
	}
	if dp := r.dead(); dp != "" {
		cols := labels
		if len(cols) == 0 {
			cols = []string{s.OrderColumn()}
		}
		out["dead"] = Index{Name: IndexName(s.Name, "dead"), Columns: cols, Where: dp, For: "the dead-row count"}
	}
	s.claimedIndexes(out, r, up, labels, include)
	if uk := s.unknownPredicate(""); uk != "" {
		key := append(append([]string{}, labels...), s.OrderColumn())
		out["unknown"] = Index{Name: IndexName(s.Name, "unknown"), Columns: key,
			Include: include(key, o.Status, cc, o.Attempts), Where: and(up, not(r.claimed()), uk),
			For: "the unknown results of unclaimed rows while capped"}
	}
	if uc := r.unclassified(); uc != "" {
		cols := labels
		if len(cols) == 0 {
			cols = []string{s.OrderColumn()}
		}
		out["unclassified"] = Index{Name: IndexName(s.Name, "unclassified"), Columns: cols, Include: include(cols, o.Status),
			Where: uc, For: "the unclassified-row count and check's list of unnamed statuses"}
	}
	if o.PublishedAt != "" {
		out["published_at"] = Index{Name: IndexName(s.Name, "published_at"), Columns: []string{o.PublishedAt},
			For: "the published counters' watermark"}
	}
	if s.LeaseColumn() != "" {
		out["id"] = Index{Name: IndexName(s.Name, "id"), Columns: []string{o.ID},
			For: "looking up what became of the leases seen live at the last sample"}
	}
	return out
}

// claimedIndexes adds to out the indexes of the claimed rows: the lease
// (or claimed) index, the claimed rows with an unknown result, and the
// claimed rows per label set.
func (s *Spec) claimedIndexes(out map[string]Index, r sqlRules, up string, labels []string, include func([]string, ...string) []string) {
	o := s.O
	cc := claimColumn(o)
	if cl := r.claimed(); cl != "" {
		// Only claimed rows: the index stays small, and its predicate is
		// not implied by the state query's, so the planner cannot pick it
		// there instead of the covering unpublished index.
		name, key, usage := "claimed", []string{s.OrderColumn()}, "the claimed-row count"
		if lc := s.LeaseColumn(); lc != "" {
			name, key, usage = "lease", []string{lc}, "the expired-lease and live-lease queries and the claimed-row count"
		}
		cols := append([]string{o.ID, o.Status, cc, o.Attempts, o.CreatedAt}, labels...)
		out["lease"] = Index{Name: IndexName(s.Name, name), Columns: key, Include: include(key, cols...),
			Where: and(up, cl), For: usage}
	}
	if cl, cu := r.claimed(), s.claimedUnknownIndexed(); cl != "" && cu != "" {
		key := []string{s.claimedOrder()}
		cols := append([]string{o.ID, o.Status, cc, o.Attempts, o.CreatedAt}, labels...)
		out["claimed_unknown"] = Index{Name: IndexName(s.Name, "claimed_unknown"), Columns: key, Include: include(key, cols...),
			Where: and(up, cl, cu), For: "the walk of the claimed rows with an unknown result while more than max_count are claimed"}
	}
	if cl := r.claimed(); cl != "" && len(labels) > 0 {
		key := append(append([]string{}, labels...), s.claimedOrder())
		out["claimed_by_label"] = Index{Name: IndexName(s.Name, "claimed_by_label"), Columns: key,
			Include: include(key, o.Status, cc, o.Attempts, o.CreatedAt), Where: and(up, cl),
			For: "the claimed rows per label set while more than max_count are claimed"}
	}
}
