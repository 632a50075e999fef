package app

import (
	"context"
	"maps"
	"net"
	"os"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/leader"
)

// leader builds the Elector of the leader_election section, if any: one
// task per reconcile job and audit. A reload that leaves the
// section and its database alone keeps the previous App's Elector, its
// session and the leases it holds: the tasks that stay are not handed
// over (no gap in their work, no lease churn); Start then gives it the
// new tasks and binds their work to the new App's parts (startLeader).
func (b *builder) leader(context.Context) error {
	le := b.a.Config.LeaderElection
	if le == nil {
		b.a.Reconcile.SetGate(nil)
		return nil
	}
	if b.keep("leader", leaseDeps(b.pcfg), leaseDeps(b.a.Config)) {
		b.a.Leader, b.a.leaderKept = b.prev.Leader, true
		b.a.bound = maps.Clone(b.prev.bound)
	} else {
		b.a.Leader = leader.New(Tasks(b.a.Config), nil, Timing(le), b.a.logger)
	}
	b.a.Reconcile.SetGate(func(job string) (context.Context, bool) {
		return b.a.Leader.Lease(leader.Task("reconcile", job))
	})
	b.cs = append(b.cs, leader.NewCollector(b.a.Leader))
	return nil
}

// leaseDeps is what the Elector's session is made of: the section and the
// database its leases live on.
func leaseDeps(cfg *config.Config) []any {
	le := cfg.LeaderElection
	if le == nil {
		return nil
	}
	return []any{le, cfg.Databases[le.Database]}
}

// Timing is the election's clock from the configuration.
func Timing(le *config.LeaderElection) leader.Timing {
	return leader.Timing{Check: le.CheckInterval, Retry: le.RetryInterval, Wait: leader.StandbyWait}
}

// Tasks lists the tasks cfg's replicas share, sorted: each reconcile job
// and each audit. A cdc entry is none: its WAL history is sampled by the
// very statement that reads its slots for every scrape, which every
// replica runs for its own metrics, so leading it would save no query,
// while a replica without a history of its own would, on taking over,
// report the slot's lag seconds as a lower bound until its history
// reached back that far.
func Tasks(cfg *config.Config) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Reconcile)) {
		out = append(out, leader.Task("reconcile", name))
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Audit)) {
		out = append(out, leader.Task("audit", name))
	}
	slices.Sort(out)
	return out
}

// startLeader runs the Elector under ctx with the identity set by
// SetIdentity, the audits started by their terms; it is closed (its
// terms ended, their work returned, its session closed) first when the
// App that owns it closes. An Elector kept from the previous App runs
// on: it takes this App's tasks (a task dropped is released, one added is
// contended) and each audit rebuilt by the reload is bound in place of
// the previous one; an audit kept as it was goes on in its term.
func (a *App) startLeader(ctx context.Context) {
	if a.leaderKept {
		a.Leader.SetTasks(Tasks(a.Config))
		a.bindAudits()
		return
	}
	le := a.Config.LeaderElection
	id := a.identity
	if id == "" {
		id = DefaultIdentity("")
	}
	a.Leader.SetDialer(leader.PGDialer(a.Config.Databases[le.Database], id, Timing(le), a.Sessions))
	a.bound = map[string]*audit.Auditor{}
	a.bindAudits()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.Leader.Run(ctx) }()
	a.own("leader", func() { cancel(); <-done })
}

// bindAudits makes each audit's term run the audit of this App, unless it
// does already (an audit a reload kept).
func (a *App) bindAudits() {
	for _, name := range slices.Sorted(maps.Keys(a.Audits)) {
		au, task := a.Audits[name], leader.Task("audit", name)
		if a.bound[name] == au {
			continue
		}
		a.bound[name] = au
		a.Leader.SetWork(task, func(ctx context.Context) {
			a.logger.Info("audit started: this replica leads it", "task", task)
			au.Start(ctx)
			<-ctx.Done()
			au.Stop()
			a.logger.Info("audit stopped: this replica no longer leads it", "task", task)
		})
	}
	for name := range a.bound {
		if a.Audits[name] == nil {
			delete(a.bound, name) // its task dropped by SetTasks
		}
	}
}

// SetIdentity names this replica in its lease session, for the others to
// say who leads; call before Start. "" keeps DefaultIdentity("").
func (a *App) SetIdentity(id string) { a.identity = id }

// DefaultIdentity is the host name (a pod's name in Kubernetes) and the
// listen address's port: what tells two replicas apart, on one host or
// many.
func DefaultIdentity(listen string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	if _, port, err := net.SplitHostPort(listen); err == nil && port != "" {
		return host + ":" + port
	}
	return host
}

// leaderOnly makes the reconcile and audit collectors of cs export their
// findings only on the replica that leads them: a standby's are none or
// stale (from a term it lost), and an alert taking the max over replicas
// would keep firing on a gap repaired since. The other collectors (the
// outbox tables, Kafka lag, cdc slots and their WAL history) are the
// cheap per-scrape work every replica does.
func leaderOnly(cs []collectors.Collector, e *leader.Elector) []collectors.Collector {
	out := make([]collectors.Collector, len(cs))
	for i, c := range cs {
		switch c.Name() {
		case "reconcile", "audit":
			out[i] = ledCollector{Collector: c, task: leader.Task(c.Name(), c.Target()), e: e}
		default:
			out[i] = c
		}
	}
	return out
}

// ledCollector is a collector whose Update runs only while its task is led
// here.
type ledCollector struct {
	collectors.Collector
	task string
	e    *leader.Elector
}

func (c ledCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	if _, ok := c.e.Lease(c.task); !ok {
		return nil
	}
	return c.Collector.Update(ctx, ch)
}

// leaseDatabases is the database whose server holds the replica's lease
// session, if leader_election is configured: its room in the session
// budget is kept from the pools' shares (pg.Budgets.Plan).
func leaseDatabases(cfg *config.Config) []*config.Database {
	if le := cfg.LeaderElection; le != nil && cfg.Databases[le.Database] != nil {
		return []*config.Database{cfg.Databases[le.Database]}
	}
	return nil
}
