package outboxsql

import "fmt"

// PlanRule is what a query's plan must show besides using its index.
type PlanRule struct {
	// Ordered: the plan must not sort (the skip-scan needs the index's
	// order).
	Ordered bool
	// CondOn: the plan must use an index with a condition on this column.
	CondOn string
	// Own: the query's own index must exist. Another index may serve
	// it on a small table, filtering rows the own index leaves out,
	// which in a big backlog costs a read of all of them.
	Own bool
}

// Plan is one query as check plans it: its name in the report, its SQL
// and arguments, and the index (a key of Indexes or OrderIndexes) it
// needs.
type Plan struct {
	Name, SQL, Index string
	Args             []any
	Rule             PlanRule
}

// Planned are the queries a sample and a stuck-rows call run, with
// the index each needs.
func (s *Spec) Planned() []Plan {
	var qs []Plan
	add := func(name, sql, index string, rule PlanRule, args ...any) {
		if sql != "" {
			qs = append(qs, Plan{Name: name, SQL: sql, Index: index, Rule: rule, Args: args})
		}
	}
	add("pending (capped, fallback)", s.PendingQuery(), "unpublished", PlanRule{})
	add("override values (capped)", s.OverridesQuery(), "unpublished", PlanRule{})
	// These read in created_at order (the id's, for a table with no
	// creation time): the unpublished index without labels, the oldest
	// index with them.
	byTime := "unpublished"
	if len(s.O.Labels) > 0 {
		byTime = "oldest"
	}
	add("state", s.StateQuery(), byTime, PlanRule{Ordered: true})
	add("stuck", s.StuckQuery(), byTime, PlanRule{Ordered: true}, 10)
	add("claimed (capped)", s.ClaimedQuery(), "lease", PlanRule{})
	add("claimed count (capped)", s.ClaimedCountQuery(), "lease", PlanRule{})
	for i, p := range append(s.ClaimedParts(), s.ClaimedUnknownPart()) {
		if p != "" || i == 0 {
			ix, rule := "lease", PlanRule{Ordered: true}
			if _, ok := s.Indexes()["claimed_unknown"]; ok && p != "" && p == s.ClaimedUnknownPart() {
				ix, rule.Own = "claimed_unknown", true
			}
			add(fmt.Sprintf("claimed walk %d (capped)", i+1), s.ClaimedWalkQuery(p, s.ClaimedBudget()), ix, rule)
		}
	}
	add("claimed (capped per label set)", s.ClaimedCappedQuery(), claimedIndex(s), PlanRule{})
	add("claimed unknown (capped per label set)", s.ClaimedUnknownQuery(), claimedIndex(s), PlanRule{})
	add("unknown (capped per label set)", s.UnknownCappedQuery(), "unknown", PlanRule{})
	add("unknown (capped)", s.UnknownQuery(), "unknown", PlanRule{})
	add("dead", s.DeadQuery(), "dead", PlanRule{})
	add("dead (capped)", s.DeadCappedQuery(), "dead", PlanRule{})
	add("unclassified", s.UnclassifiedQuery(), "unclassified", PlanRule{})
	add("unclassified (capped)", s.UnclassifiedCappedQuery(), "unclassified", PlanRule{})
	add("lease", s.LeaseQuery(), "lease", PlanRule{CondOn: s.LeaseColumn()}, int64(0))
	add("live lease", s.LiveLeaseQuery(), "lease", PlanRule{CondOn: s.LeaseColumn()})
	add("lease fate", s.LeaseFateQuery(), "id", PlanRule{}, []string{})
	add("published", s.PublishedQuery(), "published_at", PlanRule{CondOn: s.O.PublishedAt}, int64(0))
	qs = append(qs, s.orderPlanned()...)
	return qs
}

// claimedIndex is the index the per label set reads of claimed rows use.
func claimedIndex(s *Spec) string {
	if len(s.O.Labels) > 0 {
		return "claimed_by_label"
	}
	return "lease"
}
