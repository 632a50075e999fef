package outbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// checkPlans EXPLAINs every query the outbox's config implies and judges
// whether an index serves it, adding an item per query and the CREATE
// INDEX statements wanted. planned is false when a query does not plan
// (a bad filter or unknown_when): the transaction is then aborted and
// the check stops there.
func checkPlans(ctx context.Context, tx pgx.Tx, r *CheckReport, spec *outboxsql.Spec, o *config.Outbox, idx map[string]bool) (planned bool, err error) {
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		return false, err
	}
	indexes := spec.Indexes()
	maps.Copy(indexes, spec.OrderIndexes())
	dop := o.Style() == config.StyleDeleteOnPublish
	relname := o.Table[strings.LastIndex(o.Table, ".")+1:]
	for _, q := range spec.Planned() {
		// A query that must read in index order is planned with sorts
		// discouraged: on a small or new table a sort of few rows looks
		// cheaper than the index the query needs in a big backlog, and
		// check judges whether the index serves it, not today's costs.
		sortOff := "SET LOCAL enable_sort = on"
		if q.Rule.Ordered {
			sortOff = "SET LOCAL enable_sort = off"
		}
		if _, err := tx.Exec(ctx, sortOff); err != nil {
			return false, err
		}
		plan, err := explain(ctx, tx, q.SQL, q.Args...)
		what := "query " + q.Name
		if err != nil {
			// A bad filter or unknown_when shows here; the transaction is
			// aborted, so stop asking.
			r.add(false, what, "does not plan: %v", err)
			return false, nil
		}
		problem := judgePlan(plan, relname, idx, q.Rule, dop)
		ix := indexes[q.Index]
		if _, ok := idx[ix.Name]; q.Rule.Own && !ok && problem == "" {
			problem = "reads through an index that holds more rows than it needs"
		}
		if problem == "" {
			r.add(true, what, "served by an index")
			continue
		}
		if o.OffsetsTable != "" {
			// The label is the offsets table's column: no index of the
			// messages table can hold it. Each group reads its unacked
			// range through the primary key (transaction_id, offset), as
			// the library's own subscriber does.
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %s; with offsets_table each consumer group's unacked messages are read by the messages table's primary key, no index to create", what, problem))
			continue
		}
		r.add(false, what, "%s; wants index %s (for %s)", problem, ix.Name, ix.For)
		stmt := ix.SQL(o.Table)
		if !slices.Contains(r.Statements, stmt) {
			r.Statements = append(r.Statements, stmt)
		}
	}
	return true, nil
}
