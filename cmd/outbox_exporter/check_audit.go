package main

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// checkAudit verifies each audit (collectors/audit.Check): what its
// configuration lets it see, the indexes its comparison ranges over, and
// that the ids on its topics are ids of the outbox, written the same way.
// It reports whether nothing failed; warnings do not fail it.
func checkAudit(ctx context.Context, w io.Writer, cfg *config.Config, pools map[string]*pgxpool.Pool) bool {
	return checkEach(w, "audit", cfg.Audit, func(name string, a *config.Audit) (string, bool, error) {
		o := cfg.Outboxes[name]
		r, err := audit.Check(ctx, pools[o.Database], cfg.Kafka[a.Kafka], name, a, o)
		if err != nil {
			return "", false, err
		}
		return r.Text(), r.OK, nil
	})
}
