package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/leader"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// standbyConfig is the reliability outbox with one reconcile job, shared
// by leader_election.
func standbyConfig(dbURL string) string {
	return reliabilityConfig(dbURL, 2) + `
reconcile:
  search_index:
    schedule: "@every 1h"
    authority: {database: main, table: messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: main, table: search_index, key: message_id, version: version}
leader_election:
  database: main
  check_interval: 1s
  retry_interval: 100ms
`
}

// TestStandbyCollectsOnlyWhenViewed: a replica that leads no task (another
// session holds the reconcile job's lock) does not collect by itself when
// nobody scrapes it, and its page collects when viewed; once it leads, it
// keeps its trends fresh by itself again.
func TestStandbyCollectsOnlyWhenViewed(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, outboxSchema)
	db.Exec(t, `ALTER TABLE outbox ADD COLUMN message_id bigint, ADD COLUMN message_version bigint;
CREATE TABLE messages (id bigint PRIMARY KEY, version bigint NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE search_index (message_id bigint PRIMARY KEY, version bigint NOT NULL)`)
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	task := leader.Task("reconcile", "search_index")
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", leader.Key(task)); err != nil {
		t.Fatal(err)
	}
	s := startOn(t, standbyConfig(db.URL))
	a := s.App()
	waitFor(t, testutil.HangLimit, "the replica sees another session lead "+task, func() bool {
		st := a.Leader.Status()
		return len(st) == 1 && !st[0].Leading && st[0].Leader == "unknown"
	})
	if !standingBy(a) {
		t.Fatal("a replica leading no task does not count as standing by")
	}
	later := time.Now().Add(time.Hour)
	if s.refreshDue(later) {
		t.Fatal("an unscraped standby collects by itself")
	}
	// The server's first collection at start runs beside the election:
	// wait for it rather than assume it came first.
	waitFor(t, testutil.HangLimit, "the first collection at start", func() bool { return s.rec.snapshot() != nil })
	before := s.rec.snapshot()
	s.freshenForPage(ctx, later)
	after := s.rec.snapshot()
	if after == nil || !after.At.After(before.At) {
		t.Fatal("a page view on a standby whose collection is old did not collect")
	}
	s.freshenForPage(ctx, after.At.Add(time.Second))
	if again := s.rec.snapshot(); again.At != after.At {
		t.Fatal("a page view on a standby collected again within a history step")
	}
	if code, body := get(t, s.Handler(), http.MethodGet, "/"); code != http.StatusOK || !strings.Contains(body, task) {
		t.Fatalf("page on a standby: %d, no word of %s", code, task)
	}

	// The other session lets go: this replica leads and refreshes by
	// itself again.
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", leader.Key(task)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, testutil.HangLimit, "the replica leads "+task, func() bool { return !standingBy(a) })
	if !s.refreshDue(time.Now().Add(time.Hour)) {
		t.Fatalf("a leader whose collection is an hour old does not refresh (snapshot at %v)", s.rec.snapshot().At)
	}
}
