// Package app builds everything one loaded configuration runs: database
// pools, Kafka clients, collectors, reconcile schedules and audits. A
// reload builds a new App and closes the old one.
package app

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
	"github.com/outbox-exporter/outbox_exporter/collectors/database"
	"github.com/outbox-exporter/outbox_exporter/collectors/kafka"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/collectors/settings"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/leader"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/reconcile"
)

// App is the running form of one configuration.
type App struct {
	Config *config.Config
	Pools  map[string]*pgxpool.Pool
	// Sessions bound the sessions of all pools on one server
	// (sessions_per_server); one for the process, handed from App to App
	// by reloads.
	Sessions *pg.Budgets
	Exporter *collectors.Exporter
	Audits   map[string]*audit.Auditor
	// Reconcile runs the reconcile jobs; it has no jobs when none are
	// configured.
	Reconcile *reconcile.Scheduler
	// Leader elects the replica that leads each reconcile job, audit and
	// cdc entry (leader.go); nil without leader_election: this replica
	// does all of them.
	Leader *leader.Elector
	// identity names this replica to the others (SetIdentity).
	identity string
	// leaderKept: Leader is the previous App's, running (leader.go);
	// bound is the auditor each audit task's term runs.
	leaderKept bool
	bound      map[string]*audit.Auditor

	logger  *slog.Logger
	outbox  map[string]*outbox.Collector
	kafka   map[string]*kafka.Collector
	cdc     map[string]*cdc.Collector // by database
	running map[string]bool           // audits already started (kept from a reload)
	// owned are the closers of what this App opened or kept, by part
	// ("db/NAME", "kafka/NAME", "cdc/DATABASE", "audit/NAME",
	// "reconcile"), closed in reverse order of order; a part kept by the
	// next App is handed over.
	owned map[string]func()
	order []string
}

// Build opens pools and clients and constructs collectors for cfg. It does
// not wait for any database or broker to answer: an exporter starts while
// they are down and recovers when they return. On error nothing is left
// open.
func Build(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*App, error) {
	return Rebuild(ctx, cfg, logger, nil)
}

// Rebuild is Build for a reload: every part whose configuration did not
// change is taken over from prev, state and all, so that counters do not
// restart and the events around the reload are counted: the pools of
// unchanged databases, the samplers of unchanged outboxes (whether or not
// their database changed), the slot collectors (and WAL histories) of unchanged cdc
// databases, the clients and caches of unchanged Kafka clusters, the
// auditors of unchanged audits (still running) and, per reconcile job,
// the state of every unchanged job (last results, last success, a run in
// progress, its place in the schedule) in the one scheduler, which the
// reload changes in place. A part is unchanged when its own configuration
// and everything it reads from (its database, its outbox, its cluster)
// compare equal. prev keeps running until the caller closes it (its
// reconcile jobs are the new ones from the end of Rebuild); closing it
// then leaves the parts taken over alone. On error prev is untouched.
func Rebuild(ctx context.Context, cfg *config.Config, logger *slog.Logger, prev *App) (*App, error) {
	b := &builder{prev: prev, pcfg: &config.Config{}, a: &App{Config: cfg, Pools: map[string]*pgxpool.Pool{},
		Audits: map[string]*audit.Auditor{}, logger: logger, outbox: map[string]*outbox.Collector{},
		kafka: map[string]*kafka.Collector{}, cdc: map[string]*cdc.Collector{}, running: map[string]bool{}, owned: map[string]func(){}}}
	b.a.Sessions = pg.NewBudgets(cfg.SessionsPerServer)
	if prev != nil {
		b.pcfg = prev.Config
		b.a.Sessions = prev.Sessions
		b.a.Sessions.SetLimit(cfg.SessionsPerServer)
	}
	b.a.Sessions.Plan(cfg.Databases, leaseDatabases(cfg)...)
	for _, step := range []func(context.Context) error{b.pools, b.cdcs, b.outboxes, b.clusters, b.audits, b.reconcile, b.leader} {
		if err := step(ctx); err != nil {
			b.a.closeNew(b.kept)
			return nil, err
		}
	}
	if b.reload != nil {
		// Only now that nothing can fail: prev's scheduler takes the new
		// jobs.
		b.reload.Apply()
	}
	b.cs = append(b.cs, b.a.Reconcile.Collectors()...)
	// The thresholds the generic rules read (objectives, reconcile
	// intervals), from the config just built.
	b.cs = append(b.cs, settings.New(cfg))
	if b.a.Leader != nil {
		b.cs = leaderOnly(b.cs, b.a.Leader)
	}
	b.a.Exporter = collectors.NewExporter(logger, b.cs...)
	// Only now that nothing can fail: prev no longer closes what a kept.
	for _, key := range b.kept {
		delete(prev.owned, key)
	}
	return b.a, nil
}

// builder is one Rebuild in progress.
type builder struct {
	a, prev *App
	pcfg    *config.Config
	kept    []string
	cs      []collectors.Collector
	// reload changes prev's reconcile jobs once nothing can fail.
	reload *reconcile.Reload
}

// keep takes part key over from prev when its configuration (and what it
// reads) compares equal.
func (b *builder) keep(key string, prevCfg, cfg any) bool {
	if b.prev == nil || b.prev.owned[key] == nil || !reflect.DeepEqual(prevCfg, cfg) {
		return false
	}
	b.kept = append(b.kept, key)
	b.a.own(key, b.prev.owned[key])
	return true
}

func (b *builder) pools(ctx context.Context) error {
	cfg := b.a.Config
	servers := database.NewServers()
	// The databases holding outboxes first: a server's recovery state is
	// read through its first database, in the round of its outboxes.
	names := slices.Sorted(maps.Keys(cfg.Databases))
	slices.SortStableFunc(names, func(x, y string) int { return cmp.Compare(outboxesIn(cfg, y), outboxesIn(cfg, x)) })
	for _, name := range names {
		if !b.keep("db/"+name, b.pcfg.Databases[name], cfg.Databases[name]) {
			pool, closePool, err := pg.OpenShared(ctx, cfg.Databases[name], b.a.Sessions)
			if err != nil {
				return fmt.Errorf("database %q: %w", name, err)
			}
			b.a.Pools[name] = pool
			b.a.own("db/"+name, closePool)
		} else {
			b.a.Pools[name] = b.prev.Pools[name]
		}
		// Whether it is a standby, and how far behind: what every outbox
		// read there is worth; read once per server and scrape.
		b.cs = append(b.cs, servers.Collector(name, b.a.Pools[name]))
	}
	return nil
}

// outboxesIn counts the outboxes in database db.
func outboxesIn(cfg *config.Config, db string) int {
	n := 0
	for _, o := range cfg.Outboxes {
		if o.Database == db {
			n++
		}
	}
	return n
}

// outboxes builds a collector per outbox; an unchanged one continues the
// previous collector's sampler, even when its databases entry changed
// (a new DSN after a failover, another statement_timeout): counters,
// watermarks and lease memory belong to the outbox, not to the pool, so
// the rows published while the reload ran are counted by the next
// collection through the new pool. It follows cdcs: an outbox published
// by a slot reads its slot's collector.
func (b *builder) outboxes(context.Context) error {
	cfg := b.a.Config
	for _, name := range slices.Sorted(maps.Keys(cfg.Outboxes)) {
		o := cfg.Outboxes[name]
		c := outbox.NewCollector(name, o, b.a.Pools[o.Database], b.a.logger)
		b.publishedBySlot(name, c)
		if b.prev != nil {
			c.KeepState(b.prev.outbox[name])
		}
		b.a.outbox[name] = c
		b.cs = append(b.cs, c)
	}
	return nil
}

func (b *builder) clusters(context.Context) error {
	cfg := b.a.Config
	for _, name := range slices.Sorted(maps.Keys(cfg.Kafka)) {
		key := "kafka/" + name
		if b.keep(key, b.pcfg.Kafka[name], cfg.Kafka[name]) {
			b.a.kafka[name] = b.prev.kafka[name]
			b.cs = append(b.cs, b.a.kafka[name])
			continue
		}
		kc, err := kafka.NewCollector(name, cfg.Kafka[name], b.a.logger)
		if err != nil {
			return fmt.Errorf("kafka %q: %w", name, err)
		}
		b.a.kafka[name] = kc
		b.a.own(key, kc.Close)
		b.cs = append(b.cs, kc)
	}
	return nil
}

func (b *builder) audits(context.Context) error {
	cfg := b.a.Config
	for _, name := range slices.Sorted(maps.Keys(cfg.Audit)) {
		ac := cfg.Audit[name]
		o := cfg.Outboxes[name]
		key := "audit/" + name
		if b.keep(key, auditDeps(b.pcfg, name), auditDeps(cfg, name)) {
			b.a.Audits[name] = b.prev.Audits[name]
			b.a.running[name] = b.prev.running[name]
			b.cs = append(b.cs, audit.NewCollector(b.a.Audits[name]))
			continue
		}
		au, err := audit.New(name, ac, o, cfg.Kafka[ac.Kafka], b.a.Pools[o.Database], b.a.logger)
		if err != nil {
			return fmt.Errorf("audit %q: %w", name, err)
		}
		au.SetCompareInterval(ac.Interval)
		b.a.Audits[name] = au
		b.a.own(key, au.Close)
		b.cs = append(b.cs, audit.NewCollector(au))
	}
	return nil
}

// reconcile takes prev's scheduler over, its jobs to be changed per job
// (reconcile.Scheduler.Prepare), or builds one.
func (b *builder) reconcile(context.Context) error {
	if b.prev != nil && b.prev.owned["reconcile"] != nil {
		rl, err := b.prev.Reconcile.Prepare(b.a.Config, b.a.Pools)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		b.reload = rl
		b.a.Reconcile = b.prev.Reconcile
		b.kept = append(b.kept, "reconcile")
		b.a.own("reconcile", b.prev.owned["reconcile"])
		return nil
	}
	sched, err := reconcile.New(b.a.Config, b.a.Pools, b.a.logger)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	b.a.Reconcile = sched
	b.a.own("reconcile", sched.Stop)
	return nil
}

// auditDeps is what an audit reads: its own section, its outbox, its
// cluster and its database.
func auditDeps(cfg *config.Config, name string) []any {
	ac := cfg.Audit[name]
	if ac == nil {
		return nil
	}
	o := cfg.Outboxes[name]
	var db *config.Database
	if o != nil {
		db = cfg.Databases[o.Database]
	}
	// An audit started by the Elector's terms is not the same part as
	// one that runs from Start on.
	return []any{ac, o, cfg.Kafka[ac.Kafka], db, cfg.LeaderElection != nil}
}

func (a *App) own(key string, close func()) {
	a.owned[key] = close
	a.order = append(a.order, key)
}

// closeNew closes what a failed Rebuild opened, leaving the parts it
// meant to keep to their owner.
func (a *App) closeNew(kept []string) {
	for _, k := range kept {
		delete(a.owned, k)
	}
	a.Close()
}

// OpenPools opens a read-only pool for every configured database, the
// pools of one server sharing sessions_per_server sessions. It does not
// connect. On error the pools already opened are closed.
func OpenPools(ctx context.Context, cfg *config.Config) (map[string]*pgxpool.Pool, error) {
	pools := map[string]*pgxpool.Pool{}
	budgets := pg.NewBudgets(cfg.SessionsPerServer)
	budgets.Plan(cfg.Databases)
	for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
		pool, _, err := pg.OpenShared(ctx, cfg.Databases[name], budgets)
		if err != nil {
			ClosePools(pools)
			return nil, fmt.Errorf("database %q: %w", name, err)
		}
		pools[name] = pool
	}
	return pools, nil
}

// ClosePools closes pools opened by OpenPools.
func ClosePools(pools map[string]*pgxpool.Pool) {
	for _, p := range pools {
		p.Close()
	}
}

// Start begins the background work: reconcile schedules and audit tails,
// until ctx ends or their owner closes them. Audits and a scheduler kept
// from the previous App are already running, under the ctx that started
// them (the server's, not the App's), so that closing the previous App
// does not stop them.
func (a *App) Start(ctx context.Context) {
	if a.Leader != nil {
		// Audits run in the terms this replica leads; the reconcile
		// scheduler asks the Elector at each run.
		a.startLeader(ctx)
		a.Reconcile.Start()
		return
	}
	for _, name := range slices.Sorted(maps.Keys(a.Audits)) {
		if a.running[name] {
			continue
		}
		a.running[name] = true
		a.Audits[name].Start(ctx)
	}
	a.Reconcile.Start()
}

// Stuck returns the oldest unpublished rows of a configured outbox.
func (a *App) Stuck(ctx context.Context, name string, limit int) ([]outbox.StuckRow, error) {
	o, ok := a.Config.Outboxes[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownOutbox, name)
	}
	if entry, e, ok := a.Config.CDCFor(name); ok {
		// Published by a slot: only the rows behind it are stuck.
		st, err := a.cdc[e.Database].State(ctx, entry)
		if err != nil {
			return nil, fmt.Errorf("stuck rows of outbox %q, published by a replication slot whose confirmed time is unknown: %w", name, err)
		}
		return outbox.StuckBehind(ctx, a.Pools[o.Database], name, o, limit, outbox.DefaultBehindLookback,
			outbox.Confirmed{At: st.ConfirmedAt, LowerBound: st.LowerBound, Slot: e.Slot})
	}
	return outbox.Stuck(ctx, a.Pools[o.Database], name, o, limit)
}

// ErrUnknownOutbox is returned for an outbox the configuration lacks.
var ErrUnknownOutbox = fmt.Errorf("unknown outbox")

// Close stops background work and closes every pool and client it still
// owns, last opened first.
func (a *App) Close() {
	for i := len(a.order) - 1; i >= 0; i-- {
		if c := a.owned[a.order[i]]; c != nil {
			c()
			delete(a.owned, a.order[i])
		}
	}
	a.order = nil
}

// OutboxNames lists the configured outboxes, sorted.
func (a *App) OutboxNames() []string { return slices.Sorted(maps.Keys(a.Config.Outboxes)) }
