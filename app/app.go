// Package app builds everything one loaded configuration runs: database
// pools, Kafka clients, collectors, reconcile schedules and audits. A
// reload builds a new App and closes the old one.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
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
	closers []func()
	cancel  context.CancelFunc
}

// Build opens pools and clients and constructs collectors for cfg. It does
// not wait for any database or broker to answer: an exporter starts while
// they are down and recovers when they return. On error nothing is left
// open.
func Build(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*App, error) {
	pools, err := OpenPools(ctx, cfg)
	if err != nil {
		return nil, err
	}
	a := &App{Config: cfg, Pools: pools, Audits: map[string]*audit.Auditor{}, logger: logger}
	a.closers = append(a.closers, func() { ClosePools(pools) })
	var cs []collectors.Collector
	for _, name := range slices.Sorted(maps.Keys(cfg.Outboxes)) {
		o := cfg.Outboxes[name]
		cs = append(cs, outbox.NewCollector(name, o, a.Pools[o.Database], logger))
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Kafka)) {
		kc, err := kafka.NewCollector(name, cfg.Kafka[name], logger)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("kafka %q: %w", name, err)
		}
		a.closers = append(a.closers, kc.Close)
		cs = append(cs, kc)
	}
	cs = append(cs, cdcCollectors(cfg, a.Pools, logger)...)
	for _, name := range slices.Sorted(maps.Keys(cfg.Audit)) {
		ac := cfg.Audit[name]
		o := cfg.Outboxes[name]
		au, err := audit.New(name, ac, o, cfg.Kafka[ac.Kafka], a.Pools[o.Database], logger)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("audit %q: %w", name, err)
		}
		au.SetCompareInterval(ac.Interval)
		a.Audits[name] = au
		a.closers = append(a.closers, au.Close)
		cs = append(cs, audit.NewCollector(au))
	}
	sched, err := reconcile.New(cfg, a.Pools, logger)
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	a.Reconcile = sched
	a.closers = append(a.closers, sched.Stop)
	cs = append(cs, sched.Collectors()...)
	a.Exporter = collectors.NewExporter(logger, cs...)
	return a, nil
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

// Start begins the background work: reconcile schedules and audit tails.
// It ends when ctx ends or Close is called.
func (a *App) Start(ctx context.Context) {
	ctx, a.cancel = context.WithCancel(ctx)
	for _, name := range slices.Sorted(maps.Keys(a.Audits)) {
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

// Close stops background work and closes every pool and client, last
// opened first.
func (a *App) Close() {
	if a.cancel != nil {
		a.cancel()
	}
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// OutboxNames lists the configured outboxes, sorted.
func (a *App) OutboxNames() []string { return slices.Sorted(maps.Keys(a.Config.Outboxes)) }
