package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// checkCDC verifies each cdc entry's slot and what the exporter can see
// of it, printing one report per entry. It reports whether all hold.
func checkCDC(ctx context.Context, stdout io.Writer, cfg *config.Config, pools map[string]*pgxpool.Pool) bool {
	ok := true
	for _, name := range slices.Sorted(maps.Keys(cfg.CDC)) {
		e := cfg.CDC[name]
		var o *config.Outbox
		if e.Outbox != "" {
			o = cfg.Outboxes[e.Outbox]
		}
		r, err := cdc.Check(ctx, pools[e.Database], name, e, o)
		if err != nil {
			fmt.Fprintf(stdout, "cdc %s: FAIL %v\n", name, err)
			ok = false
			continue
		}
		fmt.Fprint(stdout, r.Text())
		ok = ok && r.OK
	}
	return ok
}
