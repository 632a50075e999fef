package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// pair is an authority database (messages and a status-style outbox) and
// a target database (search_index), with keys of one SQL type made by the
// function k(i) defined in both.
type pair struct {
	a, b    *pgtest.DB
	keyType string
}

// keyExprs gives, for each key type, the body of k(i): distinct keys whose
// order differs from i's for the non-integer types (and, for text, mixed
// case, whose byte order differs from most collations).
var keyExprs = map[string]string{
	"bigint": "SELECT i::bigint",
	"uuid":   "SELECT md5(i::text)::uuid",
	"text":   "SELECT CASE WHEN i % 2 = 0 THEN upper(md5(i::text)) ELSE 'k' || md5(i::text) END",
}

func newPair(t *testing.T, keyType string) *pair {
	t.Helper()
	p := &pair{a: pgtest.New(t), b: pgtest.New(t), keyType: keyType}
	fn := fmt.Sprintf("CREATE FUNCTION k(i int) RETURNS %s IMMUTABLE LANGUAGE sql AS $$ %s $$", keyType, keyExprs[keyType])
	p.a.Exec(t, fn)
	p.b.Exec(t, fn)
	p.a.Exec(t, fmt.Sprintf(`CREATE TABLE messages (id %s PRIMARY KEY, version bigint NOT NULL, created_at timestamptz NOT NULL, body text NOT NULL DEFAULT 'secret body')`, keyType))
	p.a.Exec(t, fmt.Sprintf(`CREATE TABLE outbox (event_id bigserial PRIMARY KEY, message_id %s NOT NULL, message_version bigint NOT NULL,
		created_at timestamptz NOT NULL, status text NOT NULL, published_at timestamptz, payload text NOT NULL DEFAULT 'secret payload')`, keyType))
	p.a.Exec(t, `CREATE INDEX ON outbox (message_id, message_version)`)
	p.a.Exec(t, `CREATE INDEX ON messages (created_at)`)
	p.b.Exec(t, fmt.Sprintf(`CREATE TABLE search_index (message_id %s PRIMARY KEY, version bigint NOT NULL)`, keyType))
	return p
}

// addInSync adds keys from to to (both included), old, at version 1 in
// the authority, published in the outbox and applied to the target.
func (p *pair) addInSync(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		p.add(t, i, 1, old, "PUBLISHED", 1)
	}
}

// add writes message i at version v created age ago, its outbox row with
// status (none if ""), and its target row at version tv (none if 0).
func (p *pair) add(t *testing.T, i int, v int64, age time.Duration, status string, tv int64) {
	t.Helper()
	p.a.Exec(t, `INSERT INTO messages (id, version, created_at) VALUES (k($1), $2, now() - $3::interval)`, i, v, age.String())
	if status != "" {
		p.outbox(t, i, v, age, status)
	}
	if tv > 0 {
		p.b.Exec(t, `INSERT INTO search_index VALUES (k($1), $2)`, i, tv)
	}
}

func (p *pair) outbox(t *testing.T, i int, v int64, age time.Duration, status string) {
	t.Helper()
	p.a.Exec(t, `INSERT INTO outbox (message_id, message_version, created_at, status, published_at)
		VALUES (k($1), $2, now() - $3::interval, $4, CASE WHEN $4 = 'PUBLISHED' THEN now() - $3::interval END)`, i, v, age.String(), status)
}

// key renders k(i) as findings do.
func (p *pair) key(t *testing.T, i int) string {
	t.Helper()
	var s string
	if err := p.a.Admin.QueryRow(context.Background(), `SELECT k($1)::text`, i).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (p *pair) yaml(targetDSN string) string {
	if targetDSN == "" {
		targetDSN = p.b.URL
	}
	return fmt.Sprintf(`
databases:
  main: {dsn: %q, max_connections: 2}
  search: {dsn: %q, max_connections: 2}
outboxes:
  messages:
    database: main
    table: public.outbox
    id: event_id
    created_at: created_at
    status: status
    pending: [PENDING]
    published: [PUBLISHED]
    dead: [ABANDONED]
    published_at: published_at
    deadline: 5m
reconcile:
  search_index:
    schedule: "@every 1h"
    window: 24h
    grace: 2m
    max_findings: 100
    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: search, table: public.search_index, key: message_id, version: version}
`, p.a.URL, targetDSN)
}

// logBuffer is a slog destination tests can read while runs log to it.
type logBuffer = testutil.SyncBuffer

// scheduler builds a Scheduler on the exporter's own read-only pools, with
// chunks of a few rows so that a small table spans many chunks.
func scheduler(t *testing.T, yml string, logs *logBuffer, opts ...Option) *Scheduler {
	t.Helper()
	cfg, err := config.Parse([]byte(yml), nil)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]*pgxpool.Pool{}
	for name, db := range cfg.Databases {
		pool, err := pg.Open(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		pools[name] = pool
	}
	logger := slog.New(slog.DiscardHandler)
	if logs != nil {
		logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	s, err := New(cfg, pools, logger, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	for _, js := range s.jobs {
		js.initRows, js.minRows, js.maxRows, js.leafRows = 7, 3, 11, 2
		// Findings no column dates are confirmed after grace (2m here)
		// within the run, whose clock skips the wait (confirm_test.go
		// waits for real, and tests holding them across runs).
		js.confirmInRun = true
		js.hooks.skipWaits = true
	}
	return s
}

// found renders a result's findings as sorted "kind key" lines.
func found(r *Result) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, string(f.Kind)+" "+f.Key)
	}
	sort.Strings(out)
	return out
}

func want(p *pair, t *testing.T, gaps map[Kind][]int) []string {
	var out []string
	for kind, ids := range gaps {
		for _, i := range ids {
			out = append(out, string(kind)+" "+p.key(t, i))
		}
	}
	sort.Strings(out)
	return out
}

func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// writeCount counts the writes a writer running beside a test completed,
// and keeps its first error, for the test to wait on.
type writeCount struct {
	mu     sync.Mutex
	cond   *sync.Cond
	writes int
	err    error
}

func (w *writeCount) init() { w.cond = sync.NewCond(&w.mu) }

// wrote counts one write that ended with err.
func (w *writeCount) wrote(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil && w.err == nil {
		w.err = err
	}
	w.writes++
	w.cond.Broadcast()
}

// waitFor blocks until the writer has completed n writes in all, failed,
// or a minute has passed.
func (w *writeCount) waitFor(n int) {
	deadline := time.AfterFunc(time.Minute, func() {
		w.mu.Lock()
		if w.err == nil {
			w.err = context.DeadlineExceeded
		}
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer deadline.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.writes < n && w.err == nil {
		w.cond.Wait()
	}
}
