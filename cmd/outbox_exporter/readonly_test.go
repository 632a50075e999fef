package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// writers are predicates that try to write, each in its own way. The
// set_config ones turn the session or the transaction read-write, for
// the writer in the other key to use.
var writers = map[string]string{
	"plpgsql insert":   "write_one()",
	"nextval":          "nextval('seq') > 0",
	"large object":     `lo_from_bytea(0, '\x01') > 0`,
	"lo_create":        "lo_create(0) > 0",
	"session default":  "set_config('default_transaction_read_only', 'off', false) IS NOT NULL",
	"transaction mode": "set_config('transaction_read_only', 'off', false) IS NOT NULL",
	"session and read": "set_config('default_transaction_read_only', 'off', false) IS NOT NULL AND write_one()",
	// Writes only once a statement runs read-write, so that the statements
	// before it succeed and commit the set_config in the other key.
	"insert when read-write":  "CASE WHEN current_setting('transaction_read_only') = 'off' THEN write_one() ELSE true END",
	"nextval when read-write": "CASE WHEN current_setting('transaction_read_only') = 'off' THEN nextval('seq') > 0 ELSE true END",
}

// TestConfigSQLWritesNothing puts each writer in filter and in
// unknown_when, next to a set_config that switches read-only off in the
// other, and runs the real collector (several scrapes and the stuck rows
// on the same pool), check and reconcile on the real server. Nothing may
// be written: no row, no sequence value, no large object.
func TestConfigSQLWritesNothing(t *testing.T) {
	const off = "set_config('default_transaction_read_only', 'off', false) IS NOT NULL"
	for name, w := range writers {
		for _, c := range []struct{ key, filter, unknownWhen string }{
			{"filter", w, off},
			{"unknown_when", off, w},
		} {
			t.Run(name+" in "+c.key, func(t *testing.T) {
				runWriters(t, c.filter, c.unknownWhen)
			})
		}
	}
}

func runWriters(t *testing.T, filter, unknownWhen string) {
	db := pgtest.New(t)
	db.Exec(t, writersSchema)
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(writersConfig, db.URL, filter, unknownWhen)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs syncBuffer
	succeeded := collectWithWriters(t, ctx, path, &logs)
	for _, args := range [][]string{{"check"}, {"reconcile", "--format=json"}, {"reconcile", "--full"}} {
		var out syncBuffer
		run(ctx, append(args, "--config.file="+path), &out, &out)
		logs.Write([]byte(out.String()))
	}

	var rows, los int
	var last *int64
	if err := db.Admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM pg_largeobject_metadata),
  (SELECT last_value FROM pg_sequences WHERE sequencename = 'seq')`).Scan(&rows, &los, &last); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || los != 0 || last != nil {
		t.Errorf("written: %d rows, %d large objects, sequence at %v\n%s", rows, los, deref(last), logs.String())
	}
	// The writer really ran, so the test exercised it: refused where
	// PostgreSQL refuses it read-only, run (and rolled back) where it does
	// not (large objects, set_config).
	if strings.Contains(filter+unknownWhen, "set_config('transaction_read_only'") {
		if !strings.Contains(logs.String(), "read-write mode must be set before any query") {
			t.Errorf("transaction_read_only was not refused: the writer did not run\n%s", logs.String())
		}
	} else if (strings.Contains(filter+unknownWhen, "write_one") || strings.Contains(filter+unknownWhen, "nextval")) && !strings.Contains(filter+unknownWhen, "CASE") {
		if !strings.Contains(logs.String(), "read-only transaction") {
			t.Errorf("no statement was refused as read-only: the writer did not run\n%s", logs.String())
		}
	} else if succeeded == 0 {
		t.Errorf("no collection of the outbox succeeded: the predicates did not run\n%s", logs.String())
	}
}

// writersSchema is what the writers write to (a table, a sequence, a
// function that inserts) beside an outbox and the messages it reconciles.
const writersSchema = `CREATE TABLE written (n int);
CREATE SEQUENCE seq;
CREATE FUNCTION write_one() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN INSERT INTO written VALUES (1); RETURN true; END$$;
CREATE TABLE outbox (event_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, status text NOT NULL,
  attempts int NOT NULL DEFAULT 0, last_error text, message_id bigint, message_version int);
CREATE TABLE messages (id bigint PRIMARY KEY, version int NOT NULL, created_at timestamptz NOT NULL);
INSERT INTO outbox SELECT g, now() - g * interval '1 minute', CASE WHEN g % 3 = 0 THEN 'PUBLISHED' ELSE 'PENDING' END, g % 5, 'e', g, 1
  FROM generate_series(1, 30) g;
INSERT INTO messages SELECT g, 1, now() - interval '1 hour' FROM generate_series(1, 30) g;`

// writersConfig takes the DSN, the filter and unknown_when.
const writersConfig = `
databases:
  main:
    dsn: %q
    max_connections: 1
outboxes:
  messages: {database: main, table: public.outbox, id: event_id, created_at: created_at, deadline: 5m,
    status: status, pending: [PENDING], published: [PUBLISHED], attempts: attempts, last_error: last_error,
    filter: %q, unknown_when: %q}
reconcile:
  messages:
    schedule: "@every 1h"
    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
`

// collectWithWriters builds the app on the config at path, collects four
// times and reads the stuck rows after each, and returns how many
// collections of the outbox succeeded.
func collectWithWriters(t *testing.T, ctx context.Context, path string, logs *syncBuffer) int {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.Build(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// One session (max_connections 1): a session left read-write by one
	// statement is the one the next would get.
	succeeded := 0
	for i := 0; i < 4; i++ {
		for _, m := range a.Exporter.Collect(ctx) {
			var d dto.Metric
			if m.Write(&d) == nil && strings.Contains(m.Desc().String(), "outbox_exporter_collector_success") &&
				d.GetGauge().GetValue() == 1 && hasLabel(&d, "collector", "outbox") {
				succeeded++
			}
		}
		_, _ = a.Stuck(ctx, "messages", 10)
	}
	return succeeded
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
