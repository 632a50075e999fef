// Package app builds everything one loaded configuration runs: database
// pools, Kafka clients, collectors, reconcile schedules and audits. A
// reload builds a new App and closes the old one.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/collectors/kafka"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/reconcile"
)

// App is the running form of one configuration.
type App struct {
	Config   *config.Config
	Pools    map[string]*pgxpool.Pool
	Exporter *collectors.Exporter
	Audits   map[string]*audit.Auditor
	// Reconcile runs the reconcile jobs; it has no jobs when none are
	// configured.
	Reconcile *reconcile.Scheduler

	logger  *slog.Logger
	outbox  map[string]*outbox.Collector
	kafka   map[string]*kafka.Collector
	running map[string]bool // audits already started (kept from a reload)
	// owned are the closers of what this App opened or kept, by part
	// ("db/NAME", "kafka/NAME", "audit/NAME", "reconcile"), closed in
	// reverse order of order; a part kept by the next App is handed over.
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
// restart and the events around the reload are counted (issue 14, item
// 4): the pools of unchanged databases, the samplers of unchanged
// outboxes, the clients and caches of unchanged Kafka clusters, the
// auditors of unchanged audits (still running) and the reconcile
// scheduler with its last results when no reconcile job or what it reads
// changed. A part is unchanged when its own configuration and everything
// it reads from (its database, its outbox, its cluster) compare equal.
// prev keeps running until the caller closes it; closing it then leaves
// the parts taken over alone. On error prev is untouched.
func Rebuild(ctx context.Context, cfg *config.Config, logger *slog.Logger, prev *App) (*App, error) {
	a := &App{Config: cfg, Pools: map[string]*pgxpool.Pool{}, Audits: map[string]*audit.Auditor{}, logger: logger,
		outbox: map[string]*outbox.Collector{}, kafka: map[string]*kafka.Collector{}, running: map[string]bool{},
		owned: map[string]func(){}}
	var kept []string
	keep := func(key string, prevCfg, cfg any) bool {
		if prev == nil || prev.owned[key] == nil || !reflect.DeepEqual(prevCfg, cfg) {
			return false
		}
		kept = append(kept, key)
		a.own(key, prev.owned[key])
		return true
	}
	pcfg := &config.Config{}
	if prev != nil {
		pcfg = prev.Config
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
		if keep("db/"+name, pcfg.Databases[name], cfg.Databases[name]) {
			a.Pools[name] = prev.Pools[name]
			continue
		}
		pool, err := pg.Open(ctx, cfg.Databases[name])
		if err != nil {
			a.closeNew(kept)
			return nil, fmt.Errorf("database %q: %w", name, err)
		}
		a.Pools[name] = pool
		a.own("db/"+name, pool.Close)
	}
	var cs []collectors.Collector
	for _, name := range slices.Sorted(maps.Keys(cfg.Outboxes)) {
		o := cfg.Outboxes[name]
		c := outbox.NewCollector(name, o, a.Pools[o.Database], logger)
		if prev != nil && reflect.DeepEqual(pcfg.Databases[o.Database], cfg.Databases[o.Database]) {
			c.KeepState(prev.outbox[name])
		}
		a.outbox[name] = c
		cs = append(cs, c)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Kafka)) {
		key := "kafka/" + name
		if keep(key, pcfg.Kafka[name], cfg.Kafka[name]) {
			a.kafka[name] = prev.kafka[name]
			cs = append(cs, a.kafka[name])
			continue
		}
		kc, err := kafka.NewCollector(name, cfg.Kafka[name], logger)
		if err != nil {
			a.closeNew(kept)
			return nil, fmt.Errorf("kafka %q: %w", name, err)
		}
		a.kafka[name] = kc
		a.own(key, kc.Close)
		cs = append(cs, kc)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Audit)) {
		ac := cfg.Audit[name]
		o := cfg.Outboxes[name]
		key := "audit/" + name
		if keep(key, auditDeps(pcfg, name), auditDeps(cfg, name)) {
			a.Audits[name] = prev.Audits[name]
			a.running[name] = prev.running[name]
			cs = append(cs, audit.NewCollector(a.Audits[name]))
			continue
		}
		au, err := audit.New(name, ac, o, cfg.Kafka[ac.Kafka], a.Pools[o.Database], logger)
		if err != nil {
			a.closeNew(kept)
			return nil, fmt.Errorf("audit %q: %w", name, err)
		}
		au.SetCompareInterval(ac.Interval)
		a.Audits[name] = au
		a.own(key, au.Close)
		cs = append(cs, audit.NewCollector(au))
	}
	if keep("reconcile", reconcileDeps(pcfg), reconcileDeps(cfg)) {
		a.Reconcile = prev.Reconcile
	} else {
		sched, err := reconcile.New(cfg, a.Pools, logger)
		if err != nil {
			a.closeNew(kept)
			return nil, fmt.Errorf("reconcile: %w", err)
		}
		a.Reconcile = sched
		a.own("reconcile", sched.Stop)
	}
	cs = append(cs, a.Reconcile.Collectors()...)
	a.Exporter = collectors.NewExporter(logger, cs...)
	// Only now that nothing can fail: prev no longer closes what a kept.
	for _, key := range kept {
		delete(prev.owned, key)
	}
	return a, nil
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
	return []any{ac, o, cfg.Kafka[ac.Kafka], db}
}

// reconcileDeps is what the reconcile scheduler reads: every job, the
// outboxes they name and every database (a job reads up to two).
func reconcileDeps(cfg *config.Config) []any {
	out := []any{cfg.Reconcile, cfg.Databases}
	for _, name := range slices.Sorted(maps.Keys(cfg.Reconcile)) {
		if j := cfg.Reconcile[name]; j.Outbox != nil {
			out = append(out, cfg.Outboxes[j.Outbox.Name])
		}
	}
	return out
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

// OpenPools opens a read-only pool for every configured database. It does
// not connect. On error the pools already opened are closed.
func OpenPools(ctx context.Context, cfg *config.Config) (map[string]*pgxpool.Pool, error) {
	pools := map[string]*pgxpool.Pool{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
		pool, err := pg.Open(ctx, cfg.Databases[name])
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
