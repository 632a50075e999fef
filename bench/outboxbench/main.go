// Command outboxbench measures one outbox collection on a 10M-row outbox,
// almost all published, against the naive queries a hand-written
// exporter would run, in the same run, and prints a markdown table.
//
// It builds the database outbox_bench once (10M rows, then the indexes
// that `outbox_exporter check` asks for) and reuses it when it is there
// with the right size. Each scenario marks the newest rows unpublished,
// vacuums as autovacuum would, measures, and marks them published again.
//
//	go run ./bench/outboxbench            # DATABASE_URL or 127.0.0.1:5432
//	go run ./bench/outboxbench -rebuild   # drop and build outbox_bench again
//	go run ./bench/outboxbench -order     # cost of aggregate/sequence/receipt (order.go)
//	go run ./bench/outboxbench -combos 12000,100000   # capped, many label combinations (combos.go)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

const dbName = "outbox_bench"

var start = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
}

func main() {
	server := flag.String("server", pgtest.ServerURL(), "PostgreSQL server URL (superuser)")
	rows := flag.Int("rows", 10_000_000, "outbox rows")
	small := flag.Int("small", 10_000, "unpublished rows of the normal scenario")
	incident := flag.Int("incident", 2_000_000, "unpublished rows of the incident scenario")
	runs := flag.Int("runs", 15, "collections measured per scenario (the median is shown)")
	naiveRuns := flag.Int("naive-runs", 3, "naive queries measured per scenario")
	rebuild := flag.Bool("rebuild", false, "drop outbox_bench and build it again")
	smallOnly := flag.Bool("small-only", false, "measure the normal scenario only")
	nullable := flag.Bool("nullable-labels", false, "measure with the label columns nullable and some NULL topics (nullable.go); the table is restored afterwards")
	order := flag.Bool("order", false, "measure the collection with aggregate, sequence and receipt against it without them, with -small unpublished rows, in the database "+orderDB+" (order.go)")
	combos := flag.String("combos", "", "measure the capped collection at these numbers of label combinations (comma-separated), with -incident unpublished rows, in the database "+combosDB+" (combos.go)")
	combosClaimed := flag.Bool("combos-claimed", false, "with -combos: one unpublished row in twenty claimed")
	cpuProfile := flag.String("cpuprofile", "", "write the process's CPU profile to this file")
	memProfile := flag.String("memprofile", "", "write the process's allocations (a heap profile, all samples) to this file at the end")
	flag.Parse()
	if *memProfile != "" {
		runtime.MemProfileRate = 64 << 10
		defer writeMemProfile(*memProfile)
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "outboxbench:", err)
			os.Exit(1)
		}
		defer stop()
	}
	if *combos != "" {
		if err := runCombosFlag(*server, *combos, *incident, *runs, *naiveRuns, *combosClaimed); err != nil {
			fmt.Fprintln(os.Stderr, "outboxbench:", err)
			os.Exit(1)
		}
		return
	}
	if *order {
		if err := runOrder(*server, *rows, *small, *runs); err != nil {
			fmt.Fprintln(os.Stderr, "outboxbench:", err)
			os.Exit(1)
		}
		return
	}
	if *smallOnly {
		*incident = 0
	}
	measure := func() error { return run(*server, *rows, *small, *incident, *runs, *naiveRuns, *rebuild) }
	if *nullable {
		inner := measure
		measure = func() error { return withNullableLabels(*server, inner) }
	}
	if err := measure(); err != nil {
		fmt.Fprintln(os.Stderr, "outboxbench:", err)
		os.Exit(1)
	}
}

func benchURL(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	u.Path = "/" + dbName
	return u.String(), nil
}

// benchOutbox is the outbox as deploy/example.yml configures it.
func benchOutbox() *config.Outbox {
	return &config.Outbox{Database: "main", Table: "public.outbox", ID: "event_id", CreatedAt: "created_at",
		Labels: []config.Label{{Name: "event_type", Column: "event_type"}, {Name: "destination", Column: "topic"}},
		Status: "status", Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED"}, Published: []string{"PUBLISHED"},
		Dead: []string{"ABANDONED"}, PublishedAt: "published_at", LeaseUntil: "lease_until", Attempts: "attempts",
		LastError: "last_error", Deadline: 5 * time.Minute, Deadlines: map[string]time.Duration{"order.paid": 30 * time.Second},
		MaxLabelValues: config.DefaultMaxLabelValues, MaxCount: config.DefaultMaxCount}
}

func run(server string, rows, small, incident, runs, naiveRuns int, rebuild bool) error {
	ctx := context.Background()
	rw, ro, err := openBench(ctx, server, rebuild)
	if err != nil {
		return err
	}
	defer rw.Close()
	defer ro.Close()
	o := benchOutbox()
	if err := build(ctx, rw, ro, o, rows); err != nil {
		return err
	}

	var results []result
	marked := -1
	for _, sc := range []scenario{
		{fmt.Sprintf("%d unpublished", small), small, config.DefaultMaxCount},
		{fmt.Sprintf("incident: %d unpublished, max_count %d", incident, config.DefaultMaxCount), incident, config.DefaultMaxCount},
		{fmt.Sprintf("incident: %d unpublished, max_count %d", incident, 10000), incident, 10000},
	} {
		if sc.n == 0 {
			continue
		}
		if marked != sc.n {
			if err := mark(ctx, rw, rows, sc.n); err != nil {
				return err
			}
			marked = sc.n
		}
		r, err := measureScenario(ctx, ro, o, sc, runs, naiveRuns)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if err := mark(ctx, rw, rows, 0); err != nil {
		return err
	}
	printResults(results, rows, runs, naiveRuns)
	return nil
}

// openBench creates the database outbox_bench unless it is there (drops
// it first with rebuild) and opens a writing pool and the exporter's own
// read-only pool on it.
func openBench(ctx context.Context, server string, rebuild bool) (rw, ro *pgxpool.Pool, err error) {
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", config.RedactDSN(server), err)
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, dbName).Scan(&exists); err != nil {
		return nil, nil, err
	}
	if exists && rebuild {
		logf("dropping %s", dbName)
		if _, err := admin.Exec(ctx, "DROP DATABASE "+dbName+" WITH (FORCE)"); err != nil {
			return nil, nil, err
		}
		exists = false
	}
	if !exists {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
			return nil, nil, err
		}
	}
	u, err := benchURL(server)
	if err != nil {
		return nil, nil, err
	}
	rw, err = pgxpool.New(ctx, u)
	if err != nil {
		return nil, nil, err
	}
	// The exporter's own read-only pool.
	dbc := &config.Database{DSN: config.Secret(u), MaxConnections: 2, StatementTimeout: 5 * time.Minute, LockTimeout: time.Second}
	ro, err = pg.Open(ctx, dbc)
	if err != nil {
		rw.Close()
		return nil, nil, err
	}
	return rw, ro, nil
}

// scenario is one state of the outbox: n of its newest rows unpublished,
// collected with max_count maxCount.
type scenario struct {
	name     string
	n        int
	maxCount int
}

// result is one scenario's figures.
type result struct {
	scenario                         string
	collect, best, naive, exa, stuck time.Duration
	capped                           bool
}

// measureScenario times the collection, the naive queries and the stuck
// API on the outbox as mark left it.
func measureScenario(ctx context.Context, ro *pgxpool.Pool, o *config.Outbox, sc scenario, runs, naiveRuns int) (result, error) {
	oc := *o
	oc.MaxCount = sc.maxCount
	c := outbox.NewCollector("messages", &oc, ro, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var capped bool
	collect, best, err := median(runs, func() error {
		ch := make(chan prometheus.Metric, 4096)
		err := c.Update(ctx, ch)
		close(ch)
		for m := range ch {
			if m.Desc() == cappedDesc(m) {
				var pb dto.Metric
				if m.Write(&pb) == nil && pb.Gauge != nil {
					capped = pb.Gauge.GetValue() == 1
				}
			}
		}
		return err
	})
	if err != nil {
		return result{}, fmt.Errorf("collect: %w", err)
	}
	logf("%s: collection %v, best %v (capped %v)", sc.name, collect, best, capped)
	naive, _, err := median(naiveRuns, func() error {
		return drain(ctx, ro, `SELECT status, event_type, count(*), min(created_at) FROM outbox GROUP BY status, event_type`)
	})
	if err != nil {
		return result{}, fmt.Errorf("naive: %w", err)
	}
	logf("%s: naive GROUP BY %v", sc.name, naive)
	exact, _, err := median(naiveRuns, func() error {
		return drain(ctx, ro, `SELECT status, event_type, topic, count(*), min(created_at) FROM outbox
			  WHERE status IN ('PENDING','CLAIMED') GROUP BY status, event_type, topic`)
	})
	if err != nil {
		return result{}, fmt.Errorf("exact: %w", err)
	}
	logf("%s: exact count over the unpublished rows %v", sc.name, exact)
	stuck, _, err := median(naiveRuns, func() error {
		_, err := outbox.Stuck(ctx, ro, "messages", o, 100)
		return err
	})
	if err != nil {
		return result{}, fmt.Errorf("stuck: %w", err)
	}
	logf("%s: the 100 oldest unpublished rows (/api/v1/stuck) %v", sc.name, stuck)
	return result{sc.name, collect, best, naive, exact, stuck, capped}, nil
}

func printResults(results []result, rows, runs, naiveRuns int) {
	fmt.Printf("\noutbox of %d rows, almost all published; median (and best) of %d collections, median of %d naive runs, in one run; load average %s\n\n",
		rows, runs, naiveRuns, loadavg())
	fmt.Println("| scenario | one collection | naive GROUP BY over the table | ratio | exact count over the unpublished rows | ratio | counts capped | 100 oldest rows (stuck API) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---|---:|")
	for _, r := range results {
		fmt.Printf("| %s | %s (best %s) | %s | %.0fx | %s | %.1fx | %v | %s |\n", r.scenario, ms(r.collect), ms(r.best), ms(r.naive),
			float64(r.naive)/float64(r.collect), ms(r.exa), float64(r.exa)/float64(r.collect), r.capped, ms(r.stuck))
	}
}

// cappedDesc returns m's descriptor if m is outbox_events_capped.
func cappedDesc(m prometheus.Metric) *prometheus.Desc {
	if strings.Contains(m.Desc().String(), `fqName: "`+vocab.OutboxEventsCapped+`"`) {
		return m.Desc()
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// median runs f once to warm up, then n times, and returns the median
// and the best time.
func median(n int, f func() error) (time.Duration, time.Duration, error) {
	if err := f(); err != nil {
		return 0, 0, err
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := f(); err != nil {
			return 0, 0, err
		}
		ds = append(ds, time.Since(t))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], ds[0], nil
}

// loadavg is the machine's 1-minute load average: the figures of a shared
// machine mean little without it.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

func drain(ctx context.Context, pool *pgxpool.Pool, q string) error {
	rows, err := pool.Query(ctx, q)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.Err()
}

// build creates the 10M-row outbox, all published, and the indexes check
// wants, unless a table of that size is there.
func build(ctx context.Context, rw, ro *pgxpool.Pool, o *config.Outbox, rows int) error {
	var have int64
	err := rw.QueryRow(ctx, `SELECT rows FROM bench_meta`).Scan(&have)
	if err == nil && have == int64(rows) {
		logf("reusing %s with %d rows", dbName, have)
		// Create what a newer check asks for.
		return createChecked(ctx, rw, ro, o)
	}
	logf("building %d rows in %s (a minute or two)", rows, dbName)
	for _, q := range []string{
		`DROP TABLE IF EXISTS outbox, bench_meta`,
		`CREATE TABLE outbox (
		  event_id bigint PRIMARY KEY,
		  created_at timestamptz NOT NULL,
		  event_type text NOT NULL,
		  topic text NOT NULL,
		  status text NOT NULL,
		  published_at timestamptz,
		  lease_until timestamptz,
		  attempts int NOT NULL DEFAULT 0,
		  last_error text,
		  payload text NOT NULL)`,
		// Spread over 30 days, published a second after creation.
		fmt.Sprintf(`INSERT INTO outbox (event_id, created_at, event_type, topic, status, published_at, attempts, payload)
		  SELECT i, now() - interval '30 days' + i * (interval '30 days' / %[1]d),
		    (array['order.created','order.paid','order.shipped','order.cancelled','user.created','user.updated','invoice.sent','refund.issued'])[1 + i %% 8],
		    (array['orders','payments','users','billing'])[1 + i %% 4],
		    'PUBLISHED', now() - interval '30 days' + i * (interval '30 days' / %[1]d) + interval '1 second', 1,
		    repeat(md5(i::text), 3)
		  FROM generate_series(1, %[1]d) i`, rows),
	} {
		if _, err := rw.Exec(ctx, q); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	logf("rows inserted; creating the indexes check asks for")
	if err := createChecked(ctx, rw, ro, o); err != nil {
		return err
	}
	if _, err := rw.Exec(ctx, `VACUUM ANALYZE outbox`); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	rep, err := outbox.Check(ctx, ro, "messages", o)
	if err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("check after building:\n%s", rep.Text())
	}
	for _, q := range []string{
		`CREATE TABLE bench_meta (rows bigint)`,
		fmt.Sprintf(`INSERT INTO bench_meta VALUES (%d)`, rows),
	} {
		if _, err := rw.Exec(ctx, q); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	logf("built")
	return nil
}

// createChecked runs the statements (indexes) outbox.Check asks for.
func createChecked(ctx context.Context, rw, ro *pgxpool.Pool, o *config.Outbox) error {
	rep, err := outbox.Check(ctx, ro, "messages", o)
	if err != nil {
		return err
	}
	for _, s := range rep.Statements {
		logf("%s", s)
		if _, err := rw.Exec(ctx, s); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	return nil
}

// mark makes the newest n rows unpublished, as a stalled relay leaves
// them: most pending, one in twenty claimed with a lease (half of those
// expired after an attempt), vacuums as autovacuum would after it, and
// rebuilds the partial indexes.
// n = 0 marks every row published again.
func mark(ctx context.Context, rw *pgxpool.Pool, rows, n int) error {
	logf("marking the newest %d rows unpublished", n)
	for _, q := range []string{
		`UPDATE outbox SET status = 'PUBLISHED', published_at = created_at + interval '1 second', lease_until = NULL
		   WHERE status <> 'PUBLISHED'`,
		fmt.Sprintf(`UPDATE outbox SET published_at = NULL,
		   status = CASE WHEN event_id %% 20 = 0 THEN 'CLAIMED' ELSE 'PENDING' END,
		   lease_until = CASE WHEN event_id %% 40 = 0 THEN now() - interval '1 minute'
		                      WHEN event_id %% 20 = 0 THEN now() + interval '1 hour' END
		   WHERE event_id > %d`, rows-n),
		`VACUUM ANALYZE outbox`,
		// Rebuilt, so that each scenario starts from the partial indexes a
		// steady state has: after a backlog is drained the emptied index
		// keeps its size, and a scan of it stays several times slower
		// (18 ms instead of 3 ms for 10k rows after a 2M backlog, measured
		// here) until it is rebuilt.
	} {
		if _, err := rw.Exec(ctx, q); err != nil {
			return fmt.Errorf("mark %d unpublished: %w", n, err)
		}
	}
	// Every index check created on this table (which ones depends on the
	// outbox's labels and lease style).
	res, err := rw.Query(ctx, `SELECT indexname FROM pg_indexes
	    WHERE schemaname = 'public' AND tablename = 'outbox' AND indexname LIKE 'outbox\_exporter\_%' ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("mark %d unpublished: %w", n, err)
	}
	names, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("mark %d unpublished: %w", n, err)
	}
	for _, name := range names {
		if _, err := rw.Exec(ctx, `REINDEX INDEX CONCURRENTLY `+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("mark %d unpublished: reindex %s: %w", n, name, err)
		}
	}
	return nil
}

// startCPUProfile writes the CPU profile to path until the returned stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeMemProfile writes the heap profile, whose alloc_space sample
// shows where the run allocated.
func writeMemProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxbench: memory profile:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "outboxbench: memory profile:", err)
	}
}
