// Command leaderbench measures the database work of a pair of exporter
// replicas with leader_election against one replica's, in the same run:
// each arm runs the exporter process(es) on a steady pipeline for the
// same time, scraped every 15 s as Prometheus would, and reads the
// server's own counters of the monitored databases (pg_stat_database:
// rows returned and fetched, transactions, blocks touched). The pair runs
// the cheap per-scrape queries twice (each replica collects for its own
// scrapes) and the reconcile runs once. The outbox carries the indexes
// the exporter's check asks for, as a deployment that follows it does.
//
//	go build -o /tmp/oe ./cmd/outbox_exporter && go run ./bench/leaderbench -bin /tmp/oe -for 10m
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	server := flag.String("server", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server to create the throwaway databases on")
	bin := flag.String("bin", "", "the outbox_exporter binary")
	dur := flag.Duration("for", 5*time.Minute, "how long each arm runs")
	rows := flag.Int("rows", 100000, "rows in the authority, outbox and target")
	schedule := flag.String("schedule", "@every 30s", "the reconcile job's schedule")
	scrapeFirst := flag.Bool("scrape-first-only", false, "scrape only the first replica of the pair: the pair's elected work apart from each replica's per-scrape queries")
	logStmts := flag.Bool("log-statements", false, "have the server log every statement on the two databases (log_statement=all), to tell what the transactions are")
	arms := flag.String("arms", "1,2", "the arms to run, by replicas (a ratio needs 1 and 2)")
	trace := flag.String("trace-sessions", "", "write a line per pool or lease session closed to this file")
	runs := flag.Int64("runs", -1, "end each arm once the replicas completed this many reconcile runs, after -for (-1: -for over the schedule's @every interval; 0: at -for)")
	warmup := flag.Duration("warmup", 2*time.Minute, "run one replica this long before the arms, uncounted: the broker's JIT compiler and the server's caches warm up there, not in the first arm (0: none)")
	withKafka := flag.Bool("kafka", true, "run an Apache Kafka broker (jars in .cache) with the audited topic, an audit and a consumer group whose lag is scraped")
	flag.Parse()
	o := opts{server: *server, bin: *bin, dur: *dur, rows: *rows, schedule: *schedule, scrapeFirst: *scrapeFirst, logStmts: *logStmts, kafka: *withKafka, arms: *arms, trace: *trace, runs: *runs, warmup: *warmup}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "leaderbench:", err)
		os.Exit(1)
	}
}

type opts struct {
	server, bin, schedule string
	dur, warmup           time.Duration
	rows                  int
	scrapeFirst, logStmts bool
	kafka                 bool
	arms, trace           string
	runs                  int64
}

// armRuns is the number of reconcile runs each arm ends after: o.runs,
// or with -1 as many as the schedule's @every interval fits in the arm.
func armRuns(o opts) (int64, error) {
	if o.runs >= 0 {
		return o.runs, nil
	}
	every, ok := strings.CutPrefix(o.schedule, "@every ")
	if !ok {
		return 0, fmt.Errorf("-runs: the schedule %q is no @every interval; give the runs each arm ends after", o.schedule)
	}
	d, err := time.ParseDuration(strings.TrimSpace(every))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("-runs: the schedule's interval %q is no duration; give the runs each arm ends after", every)
	}
	return int64(o.dur / d), nil
}

func run(o opts) error {
	if o.bin == "" {
		return fmt.Errorf("-bin is required")
	}
	replicas, err := parseArms(o.arms)
	if err != nil {
		return err
	}
	ctx := context.Background()
	a, b, drop, err := databases(ctx, o.server, o.rows, o.logStmts)
	if err != nil {
		return err
	}
	defer drop()
	su, err := url.Parse(o.server)
	if err != nil {
		return err
	}
	proxy, err := newPGProxy(su.Host, slices.Max(replicas))
	if err != nil {
		return err
	}
	defer proxy.close()
	if o.trace != "" {
		f, err := os.Create(o.trace)
		if err != nil {
			return err
		}
		defer f.Close()
		proxy.trace = f
	}
	var k *kafkaPipeline
	extra := ""
	if o.kafka {
		if k, err = startKafka(ctx, o.rows); err != nil {
			return err
		}
		defer k.stop()
		extra = k.config()
	}
	dir, err := os.MkdirTemp("", "leaderbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfgs, err := writeConfigs(dir, a, b, o.schedule, extra, proxy, slices.Max(replicas))
	if err != nil {
		return err
	}
	made, err := checkIndexes(ctx, o.bin, cfgs[0], a)
	if err != nil {
		return err
	}
	fmt.Printf("indexes created as check asks: %d\n", made)
	runs, err := armRuns(o)
	if err != nil {
		return err
	}
	fmt.Printf("steady pipeline: %d rows, reconcile %s, audit: %v, scrapes every 15s (first replica only: %v), %v per arm, then until %d reconcile runs completed\n",
		o.rows, o.schedule, o.kafka, o.scrapeFirst, o.dur, runs)
	if err := warmUp(ctx, o, cfgs[0], a, b, proxy, k); err != nil {
		return err
	}
	var arms []work
	for _, n := range replicas {
		w, err := arm(ctx, o.bin, cfgs[:n], a, b, o.dur, runs, o.scrapeFirst, proxy, k)
		if err != nil {
			return err
		}
		arms = append(arms, w)
	}
	if len(arms) == 2 {
		report(arms, k != nil)
	} else {
		for _, w := range arms {
			fmt.Printf("%+v\n", w)
		}
	}
	return nil
}

// writeConfigs writes a configuration per replica, which differ only in
// the proxy's port they reach the server at, so the proxy tells their
// work apart.
func writeConfigs(dir, a, b, schedule, extra string, proxy *pgProxy, n int) ([]string, error) {
	var cfgs []string
	for i := range n {
		cfg := filepath.Join(dir, fmt.Sprintf("c%d.yml", i))
		if err := os.WriteFile(cfg, []byte(config(via(a, proxy.addr(i)), via(b, proxy.addr(i)), schedule)+extra), 0o600); err != nil {
			return nil, err
		}
		cfgs = append(cfgs, cfg)
	}
	return cfgs, nil
}

// warmUp runs one replica for -warmup, uncounted.
func warmUp(ctx context.Context, o opts, cfg, a, b string, proxy *pgProxy, k *kafkaPipeline) error {
	if o.warmup <= 0 {
		return nil
	}
	runs, err := armRuns(opts{schedule: o.schedule, dur: o.warmup, runs: -1})
	if err != nil {
		runs = 0 // a schedule without an interval: the warm-up ends at -warmup
	}
	fmt.Printf("warm-up: one replica for %v and %d reconcile runs, not counted\n", o.warmup, runs)
	if _, err := arm(ctx, o.bin, []string{cfg}, a, b, o.warmup, runs, o.scrapeFirst, proxy, k); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

// parseArms reads -arms: the replicas of each arm.
func parseArms(arms string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(arms, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-arms: %q is no number of replicas", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// via returns u (a database URL) pointing at addr, a proxy's listener.
func via(u, addr string) string {
	pu, _ := url.Parse(u)
	pu.Host = addr
	return pu.String()
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

type work struct {
	// From pg_stat_database.
	tuples, xacts, blocks int64
	// From the replicas' logs: reconcile runs completed, audits started;
	// and the runs by replica.
	runs, audits     int64
	runsBy, auditsBy []int64
	// From the proxy: sessions opened, transactions, bytes each way and
	// the sessions' backends' CPU time, by kind.
	wire wire
	// serverTicks is the whole PostgreSQL server's CPU time.
	serverTicks int64
	// From the broker.
	broker  brokerWork
	scrapes int64
	// length is how long the arm ran, from its replicas' start to the
	// end of the last run it waited for.
	length time.Duration
}

// databases creates and fills the authority/outbox and target databases.
func databases(ctx context.Context, server string, rows int, logStmts bool) (string, string, func(), error) {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", "", nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	rb := make([]byte, 4)
	_, _ = rand.Read(rb)
	names := []string{"oxlb_a_" + hex.EncodeToString(rb), "oxlb_b_" + hex.EncodeToString(rb)}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+n); err != nil {
			return "", "", nil, fmt.Errorf("create database: %w", err)
		}
		if logStmts {
			if _, err := conn.Exec(ctx, "ALTER DATABASE "+n+" SET log_statement = 'all'"); err != nil {
				return "", "", nil, fmt.Errorf("log statements: %w", err)
			}
		}
	}
	drop := func() {
		c, err := pgx.Connect(context.Background(), server)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		for _, n := range names {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)")
		}
	}
	urls := []string{dbURL(server, names[0]), dbURL(server, names[1])}
	steps := []struct {
		db  int
		sql string
	}{
		{0, `CREATE TABLE messages (id bigint PRIMARY KEY, version bigint NOT NULL, created_at timestamptz NOT NULL)`},
		{0, `CREATE TABLE outbox (event_id bigserial PRIMARY KEY, message_id bigint NOT NULL, message_version bigint NOT NULL,
			created_at timestamptz NOT NULL, status text NOT NULL, published_at timestamptz)`},
		{0, fmt.Sprintf(`INSERT INTO messages SELECT i, 1, now() - interval '1 hour' FROM generate_series(1, %d) i`, rows)},
		{0, fmt.Sprintf(`INSERT INTO outbox (message_id, message_version, created_at, status, published_at)
			SELECT i, 1, now() - interval '1 hour', 'PUBLISHED', now() - interval '1 hour' FROM generate_series(1, %d) i`, rows)},
		{0, `CREATE INDEX ON outbox (message_id, message_version)`},
		{0, `CREATE INDEX ON messages (created_at)`},
		{0, `CREATE INDEX ON outbox (created_at) WHERE status <> 'PUBLISHED'`},
		{0, `VACUUM ANALYZE`},
		{1, `CREATE TABLE search_index (message_id bigint PRIMARY KEY, version bigint NOT NULL)`},
		{1, fmt.Sprintf(`INSERT INTO search_index SELECT i, 1 FROM generate_series(1, %d) i`, rows)},
		{1, `VACUUM ANALYZE`},
	}
	for _, s := range steps {
		c, err := pgx.Connect(ctx, urls[s.db])
		if err != nil {
			drop()
			return "", "", nil, err
		}
		_, err = c.Exec(ctx, s.sql)
		c.Close(ctx)
		if err != nil {
			drop()
			return "", "", nil, fmt.Errorf("%s: %w", strings.Fields(s.sql)[0], err)
		}
	}
	return urls[0], urls[1], drop, nil
}

func dbURL(server, name string) string {
	u, _ := url.Parse(server)
	u.Path = "/" + name
	return u.String()
}
