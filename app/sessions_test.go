package app

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster/pgclustertest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// fleet is a throwaway server with a small max_connections holding dbs
// databases of tables outbox tables each, the row count of each table
// (the oracle: written, then counted by the server), and the DSN of the
// exporter's and of the application's roles.
type fleet struct {
	c        *pgclustertest.Cluster
	dbs      int
	tables   int
	rows     map[string]int // by outbox name
	exporter func(db string) string
	app      string
}

// Slots of the fleet's server: 14 connections, 3 reserved for
// superusers, leaving 11 to ordinary roles; the exporter's budget (4) and
// the application's six sessions take 10.
const (
	fleetMaxConnections = 14
	fleetReserved       = 3
	appHeld             = 5
)

func startFleet(t testing.TB, dbs, tables int, seed int64, maxConnections int) *fleet {
	t.Helper()
	c := pgclustertest.Start(t, fmt.Sprintf("a server with max_connections %d", maxConnections), func(ctx context.Context) (*pgcluster.Cluster, error) {
		return pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
			"max_connections": fmt.Sprint(maxConnections), "superuser_reserved_connections": fmt.Sprint(fleetReserved),
			// Fifty databases cost less to create and to shut down
			// without WAL for their copies.
			"wal_level": "minimal", "max_wal_senders": "0"}})
	})
	ctx := context.Background()
	f := &fleet{c: c, dbs: dbs, tables: tables, rows: map[string]int{}}
	admin := func(sql string) {
		t.Helper()
		if _, err := c.Admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin(`CREATE ROLE exporter LOGIN; GRANT pg_read_all_data TO exporter; CREATE ROLE app LOGIN`)
	var schema strings.Builder
	for i := range tables {
		fmt.Fprintf(&schema, "CREATE TABLE outbox_%d (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now()); CREATE INDEX ON outbox_%d (created_at);", i, i)
	}
	rng := rand.New(rand.NewSource(seed))
	for d := range dbs {
		admin(fmt.Sprintf("CREATE DATABASE fleet_%d STRATEGY FILE_COPY", d))
		conn, err := pgx.Connect(ctx, c.URL(fmt.Sprintf("fleet_%d", d)))
		if err != nil {
			t.Fatal(err)
		}
		var data strings.Builder
		data.WriteString(schema.String())
		for i := range tables {
			fmt.Fprintf(&data, "INSERT INTO outbox_%d (created_at) SELECT now() - i * interval '1 second' FROM generate_series(1, %d) i;", i, rng.Intn(30))
		}
		if _, err := conn.Exec(ctx, data.String()); err != nil {
			t.Fatal(err)
		}
		for i := range tables {
			var n int
			if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM outbox_%d", i)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			f.rows[fmt.Sprintf("d%d_t%d", d, i)] = n
		}
		conn.Close(ctx)
	}
	role := func(name, db string) string {
		return strings.Replace(c.URL(db), "postgres://postgres@", "postgres://"+name+"@", 1)
	}
	f.exporter = func(db string) string { return role("exporter", db) }
	f.app = role("app", "fleet_0")
	// The superuser's pool is done: its sessions would take slots.
	c.Admin.Reset()
	return f
}

// appConfig is the application's connection config: its sessions, like
// the exporter's, are closed only once the server's backend has gone, so
// that its own last session, still exiting, never takes the slot of its
// next one.
func (f *fleet) appConfig(t *testing.T) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(f.app)
	if err != nil {
		t.Fatal(err)
	}
	dial := cc.DialFunc
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &waitExit{Conn: c}, nil
	}
	return cc
}

// waitExit is a socket whose Close waits for the server to close its end.
type waitExit struct{ net.Conn }

func (c *waitExit) Close() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, c.Conn)
	}
	return c.Conn.Close()
}

// config is the exporter's configuration of every outbox of the fleet.
// statement_timeout is long so that a session waiting for room never
// fails for the machine's speed.
func (f *fleet) config(t testing.TB, sessions int) *config.Config {
	t.Helper()
	var y strings.Builder
	y.WriteString("databases:\n")
	for d := range f.dbs {
		fmt.Fprintf(&y, "  d%d: {dsn: %q, statement_timeout: 60s}\n", d, f.exporter(fmt.Sprintf("fleet_%d", d)))
	}
	y.WriteString("outboxes:\n")
	for d := range f.dbs {
		for i := range f.tables {
			fmt.Fprintf(&y, "  d%d_t%d: {database: d%d, table: public.outbox_%d, id: id, created_at: created_at, deadline: 1h}\n", d, i, d, i)
		}
	}
	if sessions > 0 {
		fmt.Fprintf(&y, "sessions_per_server: %d\n", sessions)
	}
	cfg, err := config.Parse([]byte(y.String()), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// application holds appHeld sessions and opens and closes one more, over
// and over, until stop; it returns the errors of its connections.
func (f *fleet) application(t *testing.T, stop <-chan struct{}) func() []error {
	t.Helper()
	ctx := context.Background()
	cc := f.appConfig(t)
	var held []*pgx.Conn
	for range appHeld {
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			t.Fatalf("the application's session before the exporter started: %v", err)
		}
		held = append(held, conn)
	}
	// The superuser's sessions from the set-up are gone before the
	// exporter starts.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := held[0].QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = 'postgres' AND backend_type = 'client backend'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d superuser sessions still open a minute after the set-up", n)
		}
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			conn, err := pgx.ConnectConfig(ctx, cc)
			if err == nil {
				err = conn.Ping(ctx)
				conn.Close(ctx)
			}
			if err == nil && n%5 == 0 {
				err = held[n%appHeld].Ping(ctx)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}
	}()
	return func() []error {
		wg.Wait()
		for _, c := range held {
			c.Close(ctx)
		}
		return errs
	}
}

// TestFleetWithinSessionBudget: 500 outboxes over 50 databases on one
// server whose ordinary slots the application nearly fills: with the
// default budget every scrape collects every outbox with the counts the
// server gives, and every connection of the application succeeds.
func TestFleetWithinSessionBudget(t *testing.T) {
	var stopping time.Time
	t.Cleanup(func() { t.Logf("cluster stopped in %v", time.Since(stopping)) })
	start := time.Now()
	f := startFleet(t, 50, 10, 29, fleetMaxConnections)
	t.Cleanup(func() { stopping = time.Now() })
	t.Logf("fleet set up in %v", time.Since(start))
	a, err := Build(context.Background(), f.config(t, 0), testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	appDone := f.application(t, stop)
	for scrape := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		start := time.Now()
		s := scraped(a.Exporter.Collect(ctx))
		cancel()
		t.Logf("scrape %d took %v", scrape, time.Since(start))
		success, pending := indexScrape(t, s)
		for name, want := range f.rows {
			if success[name] != 1 {
				t.Errorf("scrape %d: outbox %s not collected", scrape, name)
				continue
			}
			if got := pending[name]; int(got) != want {
				t.Errorf("scrape %d: outbox %s: %v pending, the table holds %d", scrape, name, got, want)
			}
		}
	}
	close(stop)
	closeStart := time.Now()
	a.Close()
	t.Logf("closed in %v", time.Since(closeStart))
	errs := appDone()
	t.Logf("application done in %v", time.Since(closeStart))
	for i, err := range errs {
		if i < 5 {
			t.Errorf("the application's connection failed: %v", err)
		}
	}
	if len(errs) > 0 {
		t.Errorf("%d of the application's connections failed", len(errs))
	}
}

// indexScrape reads each outbox's collector success and pending count
// from one scrape, writing each series once.
func indexScrape(t testing.TB, s scraped) (success, pending map[string]float64) {
	t.Helper()
	success, pending = map[string]float64{}, map[string]float64{}
	for _, m := range s {
		isSuccess, isEvents := testutil.IsMetric(m, "outbox_exporter_collector_success"), testutil.IsMetric(m, "outbox_events")
		if !isSuccess && !isEvents {
			continue
		}
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range pb.Label {
			labels[l.GetName()] = l.GetValue()
		}
		switch {
		case isSuccess && labels["collector"] == "outbox":
			success[labels["target"]] = pb.GetGauge().GetValue()
		case isEvents && labels["state"] == "pending":
			pending[labels["outbox"]] += pb.GetGauge().GetValue()
		}
	}
	return success, pending
}
