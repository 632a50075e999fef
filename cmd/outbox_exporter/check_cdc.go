package main

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// checkCDC verifies each cdc entry's slot and what the exporter can see
// of it, printing one report per entry. It reports whether all hold.
func checkCDC(ctx context.Context, stdout io.Writer, cfg *config.Config, pools map[string]*pgxpool.Pool) bool {
	return checkEach(stdout, "cdc", cfg.CDC, func(name string, e *config.CDC) (string, bool, error) {
		var o *config.Outbox
		if e.Outbox != "" {
			o = cfg.Outboxes[e.Outbox]
		}
		r, err := cdc.Check(ctx, pools[e.Database], name, e, o)
		if err != nil {
			return "", false, err
		}
		return r.Text(), r.OK, nil
	})
}
