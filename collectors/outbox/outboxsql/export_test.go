package outboxsql

// ProbeExprs are, for the predicates test, the SELECT expressions that
// evaluate each SQL predicate on every row: the facts, published_at and
// dead_at set, then published, dead, unpublished, claimed, unclassified,
// unknown among unclaimed rows, unknown among claimed rows and lease
// passed, each coalesced to a boolean.
func (s *Spec) ProbeExprs() []string {
	b := func(p string, neutral string) string {
		if p == "" {
			return neutral
		}
		return "coalesce(" + p + ", false)"
	}
	r := s.rules("t.")
	return append(s.factExprs(), "t.published_at IS NOT NULL", "t.dead_at IS NOT NULL",
		b(r.published(), "false"), b(r.dead(), "false"), b(r.unpublished(), "true"), b(r.claimed(), "false"),
		b(r.unclassified(), "false"), b(s.unknownPredicate("t."), "false"), b(s.claimedUnknown(), "false"),
		b(s.leasePassed(col(s.claimedOrder())), "false"))
}
