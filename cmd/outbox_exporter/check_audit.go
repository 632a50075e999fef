package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// checkAudit verifies each audit (collectors/audit.Check): what its
// configuration lets it see, the indexes its comparison ranges over, and
// that the ids on its topics are ids of the outbox, written the same way.
// It reports whether nothing failed; warnings do not fail it.
func checkAudit(ctx context.Context, w io.Writer, cfg *config.Config, pools map[string]*pgxpool.Pool) bool {
	ok := true
	for _, name := range slices.Sorted(maps.Keys(cfg.Audit)) {
		a := cfg.Audit[name]
		o := cfg.Outboxes[name]
		r, err := audit.Check(ctx, pools[o.Database], cfg.Kafka[a.Kafka], name, a, o)
		if err != nil {
			fmt.Fprintf(w, "audit %s: FAIL %v\n", name, err)
			ok = false
			continue
		}
		fmt.Fprint(w, r.Text())
		ok = ok && r.OK
	}
	return ok
}
