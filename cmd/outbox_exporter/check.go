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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/collectors/cdc"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/checktext"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/reconcile"
)

// check validates the configuration, connects to every database, then
// asks each capability to verify its part: each outbox's table, columns,
// types and indexes, each reconcile job's tables and indexes, each cdc
// entry's slot, each audit's topics and ids. Every report is printed by
// the one renderer (internal/checktext), with the CREATE INDEX statements
// it wants. It exits 0 only if everything holds, 1 if something does not.
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
	for _, r := range checkReports(ctx, cfg, pools) {
		checktext.Write(stdout, r)
		ok = ok && r.OK
	}
	if !ok {
		fmt.Fprintln(stdout, "check: NOT OK")
		return 1
	}
	fmt.Fprintln(stdout, "check: OK")
	return 0
}

// checkReports runs every part's check, in a fixed order: databases,
// outboxes, reconcile jobs, cdc entries, audits, each by name.
func checkReports(ctx context.Context, cfg *config.Config, pools map[string]*pgxpool.Pool) []checktext.Report {
	var out []checktext.Report
	out = appendEach(out, "database", cfg.Databases, func(name string, d *config.Database) (checktext.Report, error) {
		return checkDatabase(ctx, name, d, pools[name]), nil
	})
	out = append(out, pg.CheckSessions(ctx, cfg, pools)...)
	out = appendEach(out, "outbox", cfg.Outboxes, func(name string, o *config.Outbox) (checktext.Report, error) {
		if err := pg.PreparePredicates(ctx, pools[o.Database], o.Table,
			pg.Predicate{Key: "outboxes." + name + ".filter", SQL: o.Filter},
			pg.Predicate{Key: "outboxes." + name + ".unknown_when", SQL: o.UnknownWhen}); err != nil {
			return checktext.Report{}, err
		}
		r, err := outbox.Check(ctx, pools[o.Database], name, o)
		if err != nil {
			return checktext.Report{}, err
		}
		return r.Report(), nil
	})
	out = appendEach(out, "reconcile", cfg.Reconcile, func(name string, _ *config.ReconcileJob) (checktext.Report, error) {
		return reconcile.Check(ctx, name, cfg, pools).Report(), nil
	})
	out = appendEach(out, "cdc", cfg.CDC, func(name string, e *config.CDC) (checktext.Report, error) {
		var o *config.Outbox
		if e.Outbox != "" {
			o = cfg.Outboxes[e.Outbox]
		}
		r, err := cdc.Check(ctx, pools[e.Database], name, e, o)
		if err != nil {
			return checktext.Report{}, err
		}
		return r.Report(), nil
	})
	return appendEach(out, "audit", cfg.Audit, func(name string, a *config.Audit) (checktext.Report, error) {
		o := cfg.Outboxes[name]
		r, err := audit.Check(ctx, pools[o.Database], cfg.Kafka[a.Kafka], name, a, o)
		if err != nil {
			return checktext.Report{}, err
		}
		return r.Report(), nil
	})
}

// appendEach runs check on every entry of m in name order and appends its
// report, or a failed one naming the error when it could not run.
func appendEach[V any](out []checktext.Report, kind string, m map[string]V, check func(name string, v V) (checktext.Report, error)) []checktext.Report {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		r, err := check(name, m[name])
		if err != nil {
			r = checktext.Failed(kind+" "+name, err)
		}
		out = append(out, r)
	}
	return out
}

// checkDatabase says whether the exporter can open a read-only session on
// the database; the heading names it with its DSN, password removed.
func checkDatabase(ctx context.Context, name string, d *config.Database, pool *pgxpool.Pool) checktext.Report {
	r := checktext.Report{Heading: fmt.Sprintf("database %s (%s)", name, config.RedactDSN(d.DSN.Reveal())), OK: true}
	var one int
	if err := pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error { return tx.QueryRow(ctx, "SELECT 1").Scan(&one) }); err != nil {
		r.OK = false
		r.Items = append(r.Items, checktext.Item{What: "connect", Detail: err.Error()})
		return r
	}
	checkStandby(ctx, &r, pool)
	return r
}
