package app

import (
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
