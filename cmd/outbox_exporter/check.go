package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// check validates the configuration, connects to every database, then
// verifies each outbox's table, columns, types and the indexes its queries
// need, and each reconcile job's tables, columns and indexes, printing the
// CREATE INDEX statements it wants. It exits 0 only if
// everything holds, 1 if something does not.
func (c *cli) check(ctx context.Context, stdout, stderr io.Writer, logger *slog.Logger) int {
	cfg, err := config.Load(c.configFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "config %s: OK\n", c.configFile)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	pools, err := app.OpenPools(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer app.ClosePools(pools)
	ok := true
	for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
		var one int
		if err := pg.ReadOnly(ctx, pools[name], func(tx pgx.Tx) error { return tx.QueryRow(ctx, "SELECT 1").Scan(&one) }); err != nil {
			fmt.Fprintf(stdout, "database %s (%s): FAIL cannot connect: %v\n", name, config.RedactDSN(cfg.Databases[name].DSN.Reveal()), err)
			ok = false
			continue
		}
		fmt.Fprintf(stdout, "database %s (%s): OK\n", name, config.RedactDSN(cfg.Databases[name].DSN.Reveal()))
	}
	for _, line := range pg.CheckSessions(ctx, cfg, pools) {
		fmt.Fprintln(stdout, line)
	}
	ok = checkEach(stdout, "outbox", cfg.Outboxes, func(name string, o *config.Outbox) (string, bool, error) {
		if err := pg.PreparePredicates(ctx, pools[o.Database], o.Table,
			pg.Predicate{Key: "outboxes." + name + ".filter", SQL: o.Filter},
			pg.Predicate{Key: "outboxes." + name + ".unknown_when", SQL: o.UnknownWhen}); err != nil {
			return "", false, err
		}
		r, err := outbox.Check(ctx, pools[o.Database], name, o)
		if err != nil {
			return "", false, err
		}
		return r.Text(), r.OK, nil
	}) && ok
	if !checkReconcile(ctx, stdout, cfg, pools) {
		ok = false
	}
	ok = checkCDC(ctx, stdout, cfg, pools) && ok
	if !checkAudit(ctx, stdout, cfg, pools) {
		ok = false
	}
	if !ok {
		fmt.Fprintln(stdout, "check: NOT OK")
		return 1
	}
	fmt.Fprintln(stdout, "check: OK")
	return 0
}
