package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/reconcile"
)

// reconcileCmd runs each selected job once now and prints its findings.
// Exit 0: no gaps; 1: gaps found; 2: error.
func (c *cli) reconcileCmd(ctx context.Context, stdout, stderr io.Writer, logger *slog.Logger) int {
	if c.reconcileFormat != "text" && c.reconcileFormat != "json" {
		fmt.Fprintf(stderr, "reconcile: --format %q is not text or json\n", c.reconcileFormat)
		return reconcile.ExitError
	}
	cfg, err := config.Load(c.configFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return reconcile.ExitError
	}
	jobs := slices.Sorted(maps.Keys(cfg.Reconcile))
	if c.reconcileJob != "" {
		if _, ok := cfg.Reconcile[c.reconcileJob]; !ok {
			fmt.Fprintf(stderr, "reconcile: job %q is not configured; configured jobs: %v\n", c.reconcileJob, jobs)
			return reconcile.ExitError
		}
		jobs = []string{c.reconcileJob}
	}
	if len(jobs) == 0 {
		fmt.Fprintln(stderr, "reconcile: no reconcile jobs are configured")
		return reconcile.ExitError
	}
	pools, err := app.OpenPools(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return reconcile.ExitError
	}
	defer app.ClosePools(pools)
	// One run and no next: findings no column dates are confirmed within
	// the run, after grace, or reported at once with --unconfirmed. A
	// person waiting at a terminal is told how many are held and until
	// when.
	opts := []reconcile.Option{reconcile.ConfirmInRun(), reconcile.OnHold(func(n reconcile.HoldNotice) {
		fmt.Fprintf(stderr, "reconcile %s: holding %d findings no column dates until %s (grace %v) to see that they persist; --unconfirmed reports them at once, unconfirmed\n",
			n.Job, n.Findings, n.Until.UTC().Format(time.RFC3339), n.Grace)
	})}
	if c.reconcileUnconfirmed {
		opts = append(opts, reconcile.ReportUnconfirmed())
	}
	sched, err := reconcile.New(cfg, pools, logger, opts...)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return reconcile.ExitError
	}
	defer sched.Stop()
	var results []*reconcile.Result
	var runErr error
	for _, job := range jobs {
		r, err := sched.Run(ctx, job, c.reconcileFull)
		if err != nil {
			fmt.Fprintf(stderr, "reconcile %s: %v\n", job, err)
			runErr = err
		}
		if r != nil {
			if err := reconcile.Print(stdout, r, c.reconcileFormat); err != nil {
				fmt.Fprintf(stderr, "reconcile %s: print: %v\n", job, err)
				runErr = err
			}
			results = append(results, r)
		}
	}
	return reconcile.ExitCode(runErr, results...)
}
