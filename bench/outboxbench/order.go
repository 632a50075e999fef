package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// orderDB is the database of -order: the bench outbox with a
// conversation and a sequence per row and a receipt, kept apart from
// outbox_bench so that the two runs do not rebuild each other's table.
const orderDB = "outbox_bench_order"

// orderOutbox is benchOutbox with aggregate, sequence and receipt.
func orderOutbox() *config.Outbox {
	o := benchOutbox()
	o.Aggregate, o.Sequence, o.Receipt = "conversation_id", "seq", "receipt_id"
	return o
}

// runOrder measures, in one run and alternating, the collection of the
// outbox with aggregate, sequence and receipt configured against the
// same collection without them, with the newest n rows unpublished: four
// events per conversation, in order, so the stream is healthy and every
// unpublished row is probed.
func runOrder(server string, rows, n, runs int) error {
	ctx := context.Background()
	rw, ro, err := openOrder(ctx, server)
	if err != nil {
		return err
	}
	defer rw.Close()
	defer ro.Close()
	if err := buildOrder(ctx, rw, ro, rows); err != nil {
		return err
	}
	if err := mark(ctx, rw, rows, n); err != nil {
		return err
	}
	defer func() { _ = mark(ctx, rw, rows, 0) }()
	// mark turns published rows back into unpublished ones, which leaves
	// their old entries in the index of published rows until a vacuum
	// can remove them; a real outbox never moves a row that way, so
	// start from the index a steady state has, as mark does for its own.
	if _, err := rw.Exec(ctx, `REINDEX INDEX CONCURRENTLY outbox_exporter_messages_aggregate`); err != nil {
		return fmt.Errorf("reindex: %w", err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	plain := outbox.NewCollector("messages", benchOutbox(), ro, quiet)
	ordered := outbox.NewCollector("messages", orderOutbox(), ro, quiet)
	collect := func(c *outbox.Collector) func() error {
		return func() error {
			ch := make(chan prometheus.Metric, 4096)
			err := c.Update(ctx, ch)
			close(ch)
			for range ch {
			}
			return err
		}
	}
	pairs := func(n int, before func() error) (time.Duration, time.Duration, float64, error) {
		return timePairs(n, collect(plain), collect(ordered), before)
	}
	for _, c := range []*outbox.Collector{plain, ordered} { // the first, full, collections
		if err := collect(c)(); err != nil {
			return err
		}
	}
	p, o, ratio, err := pairs(runs, func() error { return nil })
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	logf("no traffic: without %v, with order and receipt %v, ratio %.2f", p, o, ratio)
	// With traffic: before each pair the relays publish the 50 oldest
	// unpublished rows, in order, so both collections read them through
	// the published watermark (the last 30 s of them every time) and the
	// order check probes each for an unpublished predecessor.
	tp, to, tratio, err := pairs(runs, func() error {
		_, err := rw.Exec(ctx, `UPDATE outbox SET status = 'PUBLISHED', published_at = now(), receipt_id = 'r'
			WHERE event_id IN (SELECT event_id FROM outbox WHERE status IN ('PENDING','CLAIMED') ORDER BY event_id LIMIT 50)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("collect with traffic: %w", err)
	}
	logf("with traffic: without %v, with %v, ratio %.2f", tp, to, tratio)
	// A full scan (every OrderRescanEvery, and the first collection):
	// fresh collectors, so each collection is a first one, for both.
	fresh := func(ob func() *config.Outbox) func() error {
		return func() error { return collect(outbox.NewCollector("messages", ob(), ro, quiet))() }
	}
	pf, _, err := median(runs, fresh(benchOutbox))
	if err != nil {
		return fmt.Errorf("first collection without order: %w", err)
	}
	of, _, err := median(runs, fresh(orderOutbox))
	if err != nil {
		return fmt.Errorf("first collection with order: %w", err)
	}
	logf("first collections: without %v, with order and receipt %v", pf, of)
	printOrder(rows, n, runs, [3]time.Duration{p, tp, pf}, [3]time.Duration{o, to, of}, [3]float64{ratio, tratio, float64(of) / float64(pf)})
	return nil
}

// openOrder creates the database of -order if needed and opens a
// read-write pool and the exporter's read-only pool on it.
func openOrder(ctx context.Context, server string) (rw, ro *pgxpool.Pool, err error) {
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", config.RedactDSN(server), err)
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, orderDB).Scan(&exists); err != nil {
		return nil, nil, err
	}
	if !exists {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+orderDB); err != nil {
			return nil, nil, err
		}
	}
	u, err := dbURL(server, orderDB)
	if err != nil {
		return nil, nil, err
	}
	if rw, err = pgxpool.New(ctx, u); err != nil {
		return nil, nil, err
	}
	ro, err = pg.Open(ctx, &config.Database{DSN: config.Secret(u), MaxConnections: 2, StatementTimeout: 5 * time.Minute, LockTimeout: time.Second})
	if err != nil {
		rw.Close()
		return nil, nil, err
	}
	return rw, ro, nil
}

// timePairs times a and b one after the other, n times, each first in
// every other pair so that neither profits from the pages the other just
// read; before each pair, untimed, it calls before. It returns the
// medians and the median of the pairs' ratios b/a.
func timePairs(n int, a, b, before func() error) (time.Duration, time.Duration, float64, error) {
	var as, bs []time.Duration
	var rs []float64
	for i := 0; i < n; i++ {
		if err := before(); err != nil {
			return 0, 0, 0, err
		}
		var ta, tb time.Duration
		for k := 0; k < 2; k++ {
			f, d := a, &ta
			if (i+k)%2 == 1 {
				f, d = b, &tb
			}
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, 0, 0, err
			}
			*d = time.Since(t0)
		}
		as, bs, rs = append(as, ta), append(bs, tb), append(rs, float64(tb)/float64(ta))
	}
	sort.Float64s(rs)
	return mid(as), mid(bs), rs[len(rs)/2], nil
}

func mid(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func dbURL(server, name string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// buildOrder creates the table of -order, all published, with the
// indexes check asks for (the (aggregate, sequence) one among them),
// unless a table of that size is there.
func buildOrder(ctx context.Context, rw, ro *pgxpool.Pool, rows int) error {
	var have int64
	if err := rw.QueryRow(ctx, `SELECT rows FROM bench_meta`).Scan(&have); err == nil && have == int64(rows) {
		logf("reusing %s with %d rows", orderDB, have)
		// Create what a newer check asks for.
		return createChecked(ctx, rw, ro, orderOutbox())
	}
	logf("building %d rows in %s", rows, orderDB)
	for _, q := range []string{
		`DROP TABLE IF EXISTS outbox, bench_meta`,
		`CREATE TABLE outbox (
		  event_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, event_type text NOT NULL, topic text NOT NULL,
		  status text NOT NULL, published_at timestamptz, lease_until timestamptz, attempts int NOT NULL DEFAULT 0,
		  last_error text, conversation_id bigint NOT NULL, seq int NOT NULL, receipt_id text, payload text NOT NULL)`,
		fmt.Sprintf(`INSERT INTO outbox (event_id, created_at, event_type, topic, status, published_at, attempts,
		    conversation_id, seq, receipt_id, payload)
		  SELECT i, now() - interval '30 days' + i * (interval '30 days' / %[1]d),
		    (array['order.created','order.paid','order.shipped','order.cancelled','user.created','user.updated','invoice.sent','refund.issued'])[1 + i %% 8],
		    (array['orders','payments','users','billing'])[1 + i %% 4],
		    'PUBLISHED', now() - interval '30 days' + i * (interval '30 days' / %[1]d) + interval '1 second', 1,
		    i / 4, i %% 4, 'r' || i, repeat(md5(i::text), 3)
		  FROM generate_series(1, %[1]d) i`, rows),
	} {
		if _, err := rw.Exec(ctx, q); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	if err := createChecked(ctx, rw, ro, orderOutbox()); err != nil {
		return err
	}
	if _, err := rw.Exec(ctx, `VACUUM ANALYZE outbox`); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if rep, err := outbox.Check(ctx, ro, "messages", orderOutbox()); err != nil {
		return err
	} else if !rep.OK {
		return fmt.Errorf("check after building:\n%s", rep.Text())
	}
	for _, q := range []string{`CREATE TABLE bench_meta (rows bigint)`, fmt.Sprintf(`INSERT INTO bench_meta VALUES (%d)`, rows)} {
		if _, err := rw.Exec(ctx, q); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	return nil
}

// printOrder prints the table of runOrder: without and with the keys, and
// the ratio, for no traffic, traffic and first collections.
func printOrder(rows, n, runs int, without, with [3]time.Duration, ratio [3]float64) {
	fmt.Printf("\noutbox of %d rows, %d unpublished, 4 events per conversation; median of %d collections, pairs alternating which runs first, ratio the median of the pairs' ratios; load average %s\n\n",
		rows, n, runs, loadavg())
	fmt.Println("| collection | without | with aggregate, sequence, receipt | ratio |")
	fmt.Println("|---|---:|---:|---:|")
	for i, what := range []string{"steady state, no traffic", "steady state, 50 rows published before each collection",
		fmt.Sprintf("first collection (the full order scan, every %s)", outbox.OrderRescanEvery)} {
		fmt.Printf("| %s | %s | %s | %.2fx |\n", what, ms(without[i]), ms(with[i]), ratio[i])
	}
}
