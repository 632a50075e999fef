package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

const outboxSchema = `
CREATE TABLE outbox (
	event_id   text PRIMARY KEY,
	event_type text NOT NULL,
	status     text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	published_at timestamptz,
	lease_until timestamptz,
	attempts   int NOT NULL DEFAULT 0,
	last_error text
);
CREATE INDEX outbox_unpublished ON outbox (event_type, created_at) WHERE status IN ('PENDING', 'CLAIMED');
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE status = 'PUBLISHED';
INSERT INTO outbox (event_id, event_type, status, created_at)
SELECT 'e' || g, 'order.paid', CASE WHEN g % 10 = 0 THEN 'PENDING' ELSE 'PUBLISHED' END, now() - g * interval '1 second'
FROM generate_series(1, 200) g;
`

func reliabilityConfig(dbURL string, maxConns int) string {
	return fmt.Sprintf(`
databases:
  main:
    dsn: %q
    max_connections: %d
    statement_timeout: 5s
outboxes:
  messages:
    database: main
    table: public.outbox
    id: event_id
    created_at: created_at
    labels: {event_type: event_type}
    status: status
    pending: [PENDING]
    in_flight: [CLAIMED]
    published: [PUBLISHED]
    published_at: published_at
    lease_until: lease_until
    attempts: attempts
    last_error: last_error
    deadline: 5m
`, dbURL, maxConns)
}

func startOn(t *testing.T, cfg string) *Server {
	t.Helper()
	s, _ := serveConfig(t, cfg, Options{ScrapeTimeout: 3 * time.Second, TimeoutOffset: 200 * time.Millisecond})
	return s
}

func scrapeWith(h http.Handler, timeoutHeader string) (string, time.Duration) {
	req := httptest.NewRequest("GET", "/metrics", nil)
	if timeoutHeader != "" {
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeoutHeader)
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, req)
	return rec.Body.String(), time.Since(start)
}

const outboxOK = `outbox_exporter_collector_success{collector="outbox",target="messages"} 1`
const outboxFail = `outbox_exporter_collector_success{collector="outbox",target="messages"} 0`

// exporterSessions counts the exporter's sessions on the server.
func exporterSessions(t *testing.T, server *pgx.Conn, db string) int {
	t.Helper()
	var n int
	if err := server.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'outbox_exporter'", db).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// lockedStart starts the exporter (max_connections 2) on a database with
// outboxSchema and opens a session on the server to watch it from.
func lockedStart(t *testing.T) (*pgtest.DB, http.Handler, *pgx.Conn) {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, outboxSchema)
	s := startOn(t, reliabilityConfig(db.URL, 2))
	// The server's first collection at start runs in the background: a
	// lock taken while it reads would wait for it, and scrapes arriving
	// meanwhile would share its result, read before the lock.
	waitFor(t, testutil.HangLimit, "the first collection at start", func() bool { return s.rec.snapshot() != nil })
	server, err := pgx.Connect(context.Background(), pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(context.Background()) })
	return db, s.Handler(), server
}

// The database refuses connections and drops the exporter's sessions, then
// comes back, 100 times: each outage shows as success 0 in the next scrape,
// each return as 1 in the scrape after, and neither goroutines nor
// connections grow.
func TestDatabaseRestartCycles(t *testing.T) {
	db, h, server := lockedStart(t)
	ctx := context.Background()
	ident := pgx.Identifier{db.Name}.Sanitize()
	defer server.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS true")

	if body, _ := scrapeWith(h, ""); !strings.Contains(body, outboxOK) {
		t.Fatalf("first scrape failed:\n%s", grep(body, "collector_success"))
	}
	// The test's own admin pool would hold sessions on the database too.
	db.Admin.Reset()
	runtime.GC()
	baseGoroutines := runtime.NumGoroutine()
	const cycles = 100
	maxSessions := 0
	for i := 0; i < cycles; i++ {
		if _, err := server.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS false"); err != nil {
			t.Fatal(err)
		}
		if _, err := server.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", db.Name); err != nil {
			t.Fatal(err)
		}
		var body string
		took := testutil.Bounded(t, fmt.Sprintf("cycle %d: a scrape during the outage", i), 2*time.Second, func() { body, _ = scrapeWith(h, "2") })
		if !strings.Contains(body, outboxFail) {
			t.Fatalf("cycle %d: outage not shown as success 0 (took %v):\n%s", i, took, grep(body, "collector_success"))
		}
		if _, err := server.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS true"); err != nil {
			t.Fatal(err)
		}
		if body, _ := scrapeWith(h, "2"); !strings.Contains(body, outboxOK) {
			t.Fatalf("cycle %d: not recovered one scrape after the database returned:\n%s", i, grep(body, "collector_success"))
		}
		if n := exporterSessions(t, server, db.Name); n > maxSessions {
			maxSessions = n
		}
	}
	if maxSessions > 2 {
		t.Errorf("the exporter held %d sessions, above max_connections 2", maxSessions)
	}
	runtime.GC()
	time.Sleep(100 * time.Millisecond)
	if g := runtime.NumGoroutine(); g > baseGoroutines+5 {
		t.Errorf("goroutines grew from %d to %d over %d cycles", baseGoroutines, g, cycles)
	}
	t.Logf("%d cycles; at most %d exporter sessions; goroutines %d -> %d", cycles, maxSessions, baseGoroutines, runtime.NumGoroutine())
}

// 50 concurrent scrapes, repeated, while another session holds an ACCESS
// EXCLUSIVE lock on the outbox: every scrape answers within its deadline
// and the exporter never holds more than max_connections sessions.
func TestScrapeStormUnderLock(t *testing.T) {
	db, h, server := lockedStart(t)
	ctx := context.Background()
	tx := db.Begin(t)
	if _, err := tx.Exec(ctx, "LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	stopWatch := watchSessions(server, db.Name)
	const rounds, concurrent = 3, 50
	var (
		slowest  time.Duration
		failures int
	)
	testutil.Bounded(t, "a storm of scrapes of a locked table", 1500*time.Millisecond, func() {
		slowest, failures = scrapeStorm(h, rounds, concurrent, "1.5")
	})
	maxSessions := stopWatch()
	if failures > 0 {
		t.Errorf("%d scrapes under the lock did not report the outbox collector failed", failures)
	}
	if maxSessions > 2 {
		t.Errorf("exporter held %d sessions during the storm, above max_connections 2", maxSessions)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if body, _ := scrapeWith(h, "2"); !strings.Contains(body, outboxOK) {
		t.Fatalf("not recovered after the lock was released:\n%s", grep(body, "collector_success"))
	}
	t.Logf("%d x %d scrapes: slowest %v, at most %d exporter sessions", rounds, concurrent, slowest, maxSessions)
}

// watchSessions counts the exporter's sessions on db every 20ms until the
// returned stop is called; stop returns the most seen.
func watchSessions(server *pgx.Conn, db string) (stop func() int) {
	stopWatch := make(chan struct{})
	maxSessions := 0
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
				var n int
				// No t.Fatal off the test goroutine: a failed count is skipped.
				if err := server.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'outbox_exporter'", db).Scan(&n); err == nil && n > maxSessions {
					maxSessions = n
				}
			}
		}
	}()
	return func() int {
		close(stopWatch)
		watch.Wait()
		return maxSessions
	}
}

// scrapeStorm sends rounds of concurrent scrapes with the timeout header
// and returns the slowest and how many did not report the outbox
// collector failed.
func scrapeStorm(h http.Handler, rounds, concurrent int, timeoutHeader string) (slowest time.Duration, failures int) {
	var mu sync.Mutex
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		for i := 0; i < concurrent; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body, took := scrapeWith(h, timeoutHeader)
				mu.Lock()
				defer mu.Unlock()
				if took > slowest {
					slowest = took
				}
				if !strings.Contains(body, outboxFail) {
					failures++
				}
			}()
		}
		wg.Wait()
	}
	return slowest, failures
}
