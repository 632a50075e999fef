package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// Without --web.enable-lifecycle, POST /-/reload is refused and reloads
// nothing.
func TestReloadNeedsLifecycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yml")
	os.WriteFile(path, []byte(goodConfig), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, Options{ConfigFile: path, Logger: quiet(), ScrapeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := s.App()
	os.WriteFile(path, []byte(strings.Replace(goodConfig, "deadline: 5m", "deadline: 7m", 1)), 0o600)
	code, body := get(t, s.Handler(), "POST", "/-/reload")
	if code != http.StatusForbidden || !strings.Contains(body, "--web.enable-lifecycle") {
		t.Errorf("POST /-/reload without the flag answered %d %q, want 403 naming the flag", code, body)
	}
	if s.App() != first {
		t.Error("POST /-/reload reloaded without --web.enable-lifecycle")
	}
}

// syncBuf collects a log written from several goroutines.
type syncBuf = testutil.SyncBuffer

func dbServer(t *testing.T, db *pgtest.DB, extra string, opts Options) (*Server, *syncBuf) {
	t.Helper()
	cfg := fmt.Sprintf(`
databases:
  main:
    dsn: %q
    max_connections: 2
    statement_timeout: 2m
    lock_timeout: 2m
outboxes:
  messages:
    database: main
    table: public.outbox
    id: id
    created_at: created_at
    deadline: 5m
%s`, db.URL, extra)
	logs := &syncBuf{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, _ := serveConfig(t, cfg, opts)
	return s, logs
}

// A database error can quote row data; /api/v1/stuck and the page answer
// with an id to find in the log instead.
func TestStuckErrorsQuoteNoRowData(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (id bigint, created_at timestamptz NOT NULL, payload text);
INSERT INTO outbox VALUES (1, now(), 'ROWDATA-7f3a');`)
	s, logs := dbServer(t, db, "    filter: \"payload::int > 0\"\n", Options{ScrapeTimeout: 10 * time.Second})
	h := s.Handler()
	code, body := get(t, h, "GET", "/api/v1/stuck?outbox=messages")
	get(t, h, "GET", "/metrics") // the page shows outboxes from the last collection
	_, page := get(t, h, "GET", "/")
	if code != http.StatusServiceUnavailable {
		t.Errorf("stuck rows answered %d, want 503: %s", code, body)
	}
	for what, out := range map[string]string{"API": body, "page": page} {
		if strings.Contains(out, "ROWDATA") || strings.Contains(out, "invalid input syntax") {
			t.Errorf("the %s quotes the database error:\n%s", what, out)
		}
		m := regexp.MustCompile(`id ([0-9a-f]{12})`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("the %s names no error id:\n%s", what, out)
			continue
		}
		if !regexp.MustCompile(`error_id=` + m[1] + `.*invalid input syntax`).MatchString(logs.String()) {
			t.Errorf("the log has no line with error_id=%s and the database error:\n%s", m[1], logs.String())
		}
	}
}

func TestStuckLimitCapped(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (id bigint, created_at timestamptz NOT NULL); INSERT INTO outbox VALUES (1, now());`)
	s, _ := dbServer(t, db, "", Options{ScrapeTimeout: 10 * time.Second})
	h := s.Handler()
	for _, l := range []string{"101", "1000", "0", "x"} {
		if code, body := get(t, h, "GET", "/api/v1/stuck?outbox=messages&limit="+l); code != http.StatusBadRequest || !strings.Contains(body, "from 1 to 100") {
			t.Errorf("limit=%s answered %d %s", l, code, body)
		}
	}
	if code, body := get(t, h, "GET", "/api/v1/stuck?outbox=messages&limit=100"); code != http.StatusOK {
		t.Errorf("limit=100 answered %d %s", code, body)
	}
}

// TestScrapesKeepTheirSessionUnderAStorm: stuck-row queries that hold
// their session (blocked on an advisory lock the test holds, for as long
// as their deadline allows) are sent by many API and page requests at once;
// every scrape meanwhile still collects the outbox, because the stuck-row
// queries of an outbox run one at a time and leave a session free.
func TestScrapesKeepTheirSessionUnderAStorm(t *testing.T) {
	db := pgtest.New(t)
	// The gate blocks only the stuck-row query (its LIMIT is a parameter;
	// the scrape's are literals), so the scrape's own queries never wait
	// on the lock: only for a session.
	db.Exec(t, `CREATE TABLE outbox (id bigint, created_at timestamptz NOT NULL);
INSERT INTO outbox SELECT g, now() - g * interval '1 second' FROM generate_series(1, 50) g;
CREATE FUNCTION stuck_gate(q text) RETURNS boolean LANGUAGE plpgsql STABLE AS $f$
BEGIN
  IF q LIKE '%LIMIT $1%' THEN PERFORM pg_advisory_xact_lock_shared(4242); END IF;
  RETURN true;
END $f$;`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	unlock := holdAdvisoryLock(t, ctx, db, 4242)
	defer unlock()

	// A stuck-row request may hold its query for a minute: far longer
	// than a scrape may wait for a session.
	s, logs := dbServer(t, db, "    filter: \"stuck_gate(current_query())\"\n", Options{ScrapeTimeout: time.Minute})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	client := &http.Client{Timeout: 2 * time.Minute}

	st := startStorm(ctx, client, srv.URL)
	defer func() {
		st.stop()
		unlock()
		st.wg.Wait()
	}()

	// The storm really holds a session: a stuck-row query waits on the lock.
	waitFor(t, 30*time.Second, "a stuck-row query blocked on the advisory lock", func() bool {
		return advisoryWaiters(ctx, db) > 0
	})
	for i := 0; i < 5; i++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/metrics", nil)
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "15")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `outbox_exporter_collector_success{collector="outbox",target="messages"} 1`) {
			t.Errorf("scrape %d under the storm did not collect the outbox:\n%s\nlogs:\n%s", i, grep(string(b), "collector_success"), logs.String())
		}
	}
	if blocked := advisoryWaiters(ctx, db); blocked != 1 {
		t.Errorf("%d stuck-row queries hold a session at once, want 1", blocked)
	}
	if st.tooMany.Load() == 0 {
		t.Errorf("no request was turned away with 429 (%d sent)", st.sent.Load())
	}
	t.Logf("%d storm requests, %d answered 429", st.sent.Load(), st.tooMany.Load())
}

// holdAdvisoryLock takes the session advisory lock key on a connection of
// db's admin pool; the returned unlock (safe to call twice) frees it.
func holdAdvisoryLock(t *testing.T, ctx context.Context, db *pgtest.DB, key int64) (unlock func()) {
	t.Helper()
	lock, err := db.Admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	return func() {
		if !unlocked {
			lock.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, key)
			lock.Release()
			unlocked = true
		}
	}
}

// advisoryWaiters counts the exporter's sessions on db waiting on an
// advisory lock (0 if the count fails).
func advisoryWaiters(ctx context.Context, db *pgtest.DB) int {
	var n int
	db.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'outbox_exporter' AND wait_event = 'advisory'`, db.Name).Scan(&n)
	return n
}

// storm is 12 clients sending stuck-row and page requests until stop.
type storm struct {
	tooMany, sent atomic.Int64
	stop          context.CancelFunc
	wg            sync.WaitGroup
}

func startStorm(ctx context.Context, client *http.Client, base string) *storm {
	st := &storm{}
	stormCtx, stop := context.WithCancel(ctx)
	st.stop = stop
	for i := 0; i < 12; i++ {
		path := "/api/v1/stuck?outbox=messages&limit=100"
		if i%3 == 0 {
			path = "/"
		}
		st.wg.Add(1)
		go func() {
			defer st.wg.Done()
			for stormCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(stormCtx, "GET", base+path, nil)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				st.sent.Add(1)
				if resp.StatusCode == http.StatusTooManyRequests {
					st.tooMany.Add(1)
				}
				// Not a wait for a condition: it keeps the storm from
				// spinning the test machine's cores.
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	return st
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// Label values, ids and last_error come from the monitored table: the
// page escapes them as HTML, the JSON APIs as JSON, and both show them.
func TestRowDataIsEscaped(t *testing.T) {
	db := pgtest.New(t)
	const hostile = `<script>alert("x")</script>&<img src=x onerror=alert(1)>`
	db.Exec(t, `CREATE TABLE outbox (id text, created_at timestamptz NOT NULL, kind text, attempts int, last_error text);`)
	db.Exec(t, `INSERT INTO outbox VALUES ($1, now() - interval '1 hour', $1, 3, $1)`, hostile)
	s, _ := dbServer(t, db, "    labels: {kind: kind}\n    attempts: attempts\n    last_error: last_error\n", Options{ScrapeTimeout: 10 * time.Second})
	h := s.Handler()
	get(t, h, "GET", "/metrics")
	_, page := get(t, h, "GET", "/")
	code, api := get(t, h, "GET", "/api/v1/stuck?outbox=messages")
	if code != http.StatusOK {
		t.Fatalf("stuck rows: %d %s", code, api)
	}
	for what, out := range map[string]string{"page": page, "API": api} {
		for _, raw := range []string{"<script>", "<img", `"x")`} {
			if strings.Contains(out, raw) {
				t.Errorf("the %s shows %q unescaped", what, raw)
			}
		}
	}
	if !strings.Contains(page, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("the page does not show the row's id and last_error escaped:\n%s", page)
	}
	var got struct {
		Rows []struct {
			ID        string `json:"id"`
			LastError string `json:"last_error"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(api), &got); err != nil || len(got.Rows) != 1 {
		t.Fatalf("API answer %v: %s", err, api)
	}
	if got.Rows[0].ID != hostile || got.Rows[0].LastError != hostile {
		t.Errorf("the API does not give the values back exactly: %+v", got.Rows[0])
	}
}
