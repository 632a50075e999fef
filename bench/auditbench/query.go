package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// query measures the audit's outbox-side query (the comparison every 30 s)
// in PostgreSQL, on an outbox holding an hour of published rows at
// 50 rows/s (180,000) and then 10,000 or 2,000,000 unpublished rows, with
// the indexes `check` asks for. Baseline, in the same run: the query
// the audit ran before it chose rows by publication time, which read the window's rows by created_at only (and so
// missed backlog rows); ratios are against it.
//
//	go run ./bench/auditbench -mode query     # DATABASE_URL or 127.0.0.1:5432
func query() error {
	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	db := fmt.Sprintf("auditbench_%d", os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return err
	}
	defer func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)") }()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.Database = db
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, s := range []string{
		`CREATE TABLE outbox (event_id text PRIMARY KEY, created_at timestamptz NOT NULL, status text NOT NULL, published_at timestamptz, body text)`,
		`INSERT INTO outbox SELECT md5(i::text), now() - i * interval '20 ms' - interval '1 s', 'PUBLISHED', now() - i * interval '20 ms', repeat('x', 200)
		 FROM generate_series(1, 180000) i`,
		`CREATE INDEX ON outbox (published_at)`,
		`CREATE INDEX ON outbox (created_at)`,
		`CREATE INDEX ON outbox (created_at) WHERE status IN ('PENDING', 'CLAIMED')`,
		`CREATE INDEX ON outbox (created_at) WHERE status IN ('ABANDONED')`,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%.40s: %w", s, err)
		}
	}
	o := &config.Outbox{Table: "public.outbox", ID: "event_id", CreatedAt: "created_at", Status: "status",
		Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED"}, Published: []string{"PUBLISHED"}, Dead: []string{"ABANDONED"}, PublishedAt: "published_at"}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "unpublished\tsample\tbaseline ms (created_at window)\taudit ms\t× baseline\trows returned")
	have := 0
	for _, backlog := range []int{10_000, 2_000_000} {
		// The backlog: created over the last 3 hours, never published.
		if _, err := conn.Exec(ctx, `INSERT INTO outbox SELECT md5('u' || i::text), now() - (i % 10800) * interval '1 s', 'PENDING', NULL, repeat('x', 200)
			FROM generate_series($1::int + 1, $2::int) i`, have, backlog); err != nil {
			return err
		}
		have = backlog
		if _, err := conn.Exec(ctx, "VACUUM ANALYZE outbox"); err != nil {
			return err
		}
		for _, sample := range []float64{0.1, 1} {
			q := audit.OutboxQuery(o, sample)
			old := "SELECT event_id::text, 0, published_at, created_at FROM outbox WHERE created_at >= $1"
			if p := audit.NewSampler(sample).SQL("event_id::text"); p != "" {
				old += " AND " + p
			}
			from := time.Now().Add(-time.Hour + time.Minute)
			base, _, err := timeQuery(ctx, conn, old, from)
			if err != nil {
				return err
			}
			got, n, err := timeQuery(ctx, conn, q, from)
			if err != nil {
				return err
			}
			fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%.2f\t%d\n", backlog, sample, ms(base), ms(got), got.Seconds()/base.Seconds(), n)
		}
	}
	return tw.Flush()
}

// timeQuery runs q six times in read-only transactions, reading every
// row, and returns the median time of the last five (the first warms the
// cache) and the rows of the last run.
func timeQuery(ctx context.Context, conn *pgx.Conn, q string, from time.Time) (time.Duration, int, error) {
	var ds []time.Duration
	var n int
	for i := 0; i < 6; i++ {
		start := time.Now()
		err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			var args []any
			if strings.Contains(q, "$1") {
				args = append(args, from)
			}
			rows, err := tx.Query(ctx, q, args...)
			if err != nil {
				return err
			}
			n = 0
			for rows.Next() {
				n++
			}
			return rows.Err()
		})
		if err != nil {
			return 0, 0, fmt.Errorf("%.60s: %w", q, err)
		}
		if i > 0 {
			ds = append(ds, time.Since(start))
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], n, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
