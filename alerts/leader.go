package alerts

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// LeaderlessMin is the least time a task may go without a leader before
// OutboxTaskLeaderless fires: longer than any failover (a retry and a
// takeover wait, seconds; a partition, the lease session's keepalives),
// so a handover never fires it.
const LeaderlessMin = 5 * time.Minute

// leaderAlerts fire when no replica leads a task that leader_election
// shares: its work (reconcile runs, the audit) is then done by no one. One
// rule per task, each waiting what its schedule allows: a reconcile job
// its run limit (a missed run), an audit LeaderlessMin. A cdc entry's
// lease gates no work (every replica keeps its WAL history), so no alert.
func (b *builder) leaderAlerts() []Rule {
	if b.cfg.LeaderElection == nil {
		return nil
	}
	var rules []Rule
	add := func(task string, wait time.Duration, what string) {
		w := model.Duration(wait).String()
		rules = append(rules, b.alert("OutboxTaskLeaderless",
			fmt.Sprintf("max by (%s) ("+vocab.ExporterLeader+"%s) == 0", b.by(vocab.LabelTask), b.selector(eq(vocab.LabelTask, task))),
			says{forDur: w, fill: []string{"wait", w, "work", what}},
			map[string]string{vocab.LabelTask: task}))
	}
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Reconcile)) {
		add("reconcile/"+name, max(RunLimit(b.cfg.Reconcile[name].Schedule), LeaderlessMin),
			"its scheduled runs are not happening, so lost events go unnoticed")
	}
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Audit)) {
		add("audit/"+name, LeaderlessMin, "no replica reads the topics for the audit, so silent loss goes unnoticed")
	}
	return rules
}
