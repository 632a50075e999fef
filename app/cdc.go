package app

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// cdcCollectors returns one slot collector per database named in the cdc
// section: its slots are read in one statement and share one history of
// the server's WAL position.
func cdcCollectors(cfg *config.Config, pools map[string]*pgxpool.Pool, logger *slog.Logger) []collectors.Collector {
	byDB := cdc.ByDatabase(cfg.CDC)
	var cs []collectors.Collector
	for _, db := range slices.Sorted(maps.Keys(byDB)) {
		cs = append(cs, cdc.NewCollector(db, byDB[db], pools[db], logger))
	}
	return cs
}

// cdcs builds the change data capture collectors, one per database. They
// start afresh on a reload: their WAL history seeds itself again from the
// last checkpoint (collectors/cdc), so the lag reads as a marked lower
// bound until the history spans it.
func (b *builder) cdcs(context.Context) error {
	b.cs = append(b.cs, cdcCollectors(b.a.Config, b.a.Pools, b.a.logger)...)
	return nil
}
