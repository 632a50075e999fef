// Package postgres_test runs deploy/postgres/monitoring-role.sql with the
// real psql on the real server and checks the role it makes.
package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

const appSchema = `
CREATE TABLE outbox (event_id uuid PRIMARY KEY DEFAULT gen_random_uuid(), created_at timestamptz NOT NULL DEFAULT now(),
  event_type text NOT NULL DEFAULT 'order.paid', topic text NOT NULL DEFAULT 'messages', status text NOT NULL DEFAULT 'PENDING',
  published_at timestamptz, lease_until timestamptz, attempts int NOT NULL DEFAULT 0, last_error text,
  message_id bigint, message_version int, payload jsonb,
  conversation_id text, seq bigint, receipt_id text);
CREATE TABLE messages (id bigint PRIMARY KEY, version int NOT NULL, created_at timestamptz NOT NULL, body text);
CREATE SEQUENCE app_seq;
CREATE FUNCTION app_write() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN INSERT INTO messages VALUES (999, 1, now(), 'x'); RETURN true; END$$;
INSERT INTO messages SELECT g, 1, now() - interval '1 hour', 'secret body' FROM generate_series(1, 20) g;
INSERT INTO outbox (created_at, status, message_id, message_version, payload)
  SELECT now() - interval '1 hour', 'PUBLISHED', g, 1, '{}' FROM generate_series(1, 20) g;`

// The role made by monitoring-role.sql runs everything the exporter needs
// for deploy/example.yml (outbox collection, stuck rows, reconcile, check's
// reads), and, with its session switched read-write, can still write,
// create or reach nothing else.
func TestMonitoringRole(t *testing.T) {
	appDB, searchDB := pgtest.New(t), pgtest.New(t)
	appDB.Exec(t, appSchema)
	searchDB.Exec(t, `CREATE TABLE search_index (message_id bigint PRIMARY KEY, version int NOT NULL, doc text);
INSERT INTO search_index SELECT g, 1, 'doc' FROM generate_series(1, 20) g;`)
	b := make([]byte, 4)
	rand.Read(b)
	role := "oxt_monitor_" + hex.EncodeToString(b)
	const password = "R0le-pw/'\"\\ $x"
	t.Cleanup(func() {
		for _, db := range []*pgtest.DB{appDB, searchDB} {
			db.Admin.Exec(context.Background(), "DROP OWNED BY "+role)
		}
		appDB.Admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})

	script, _ := filepath.Abs("monitoring-role.sql")
	psql := func(env []string, args ...string) (string, error) {
		cmd := exec.Command("psql", append([]string{appDB.URL, "-X", "-q", "-v", "role=" + role, "-v", "app_db=" + appDB.Name, "-v", "search_db=" + searchDB.Name, "-f", script}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// A password on the command line is refused.
	if out, err := psql(nil, "-v", "password=onthecommandline"); err == nil || !strings.Contains(out, "do not pass the password with -v") {
		t.Fatalf("the script accepted -v password: %v\n%s", err, out)
	}
	for run := 0; run < 2; run++ { // running it again must work too
		if out, err := psql([]string{"OUTBOX_MONITOR_PASSWORD=" + password}); err != nil {
			t.Fatalf("run %d of monitoring-role.sql: %v\n%s", run, err, out)
		}
	}
	var verifier string
	appDB.Admin.QueryRow(context.Background(), `SELECT rolpassword FROM pg_authid WHERE rolname = $1`, role).Scan(&verifier)
	if !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Errorf("the role's password is not set as a SCRAM verifier: %q", verifier)
	}

	asRole := func(db *pgtest.DB) string {
		u, _ := url.Parse(db.URL)
		u.User = url.User(role) // the server trusts loopback; the password is checked above
		return u.String()
	}
	t.Run("the exporter works", func(t *testing.T) { exporterWorks(t, asRole(appDB), asRole(searchDB)) })
	t.Run("forbidden things fail", func(t *testing.T) { forbiddenFail(t, asRole(appDB), asRole(searchDB)) })
}

func exporterWorks(t *testing.T, appDSN, searchDSN string) {
	t.Setenv("OUTBOX_DSN", appDSN)
	t.Setenv("SEARCH_DSN", searchDSN)
	example, _ := filepath.Abs("../example.yml")
	cfg, err := config.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kafka, cfg.Audit = nil, nil // no broker here; they do not touch the database
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs strings.Builder
	a, err := app.Build(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ok := false
	for _, m := range a.Exporter.Collect(ctx) {
		var d dto.Metric
		if m.Write(&d) == nil && strings.Contains(m.Desc().String(), `"outbox_exporter_collector_success"`) {
			for _, l := range d.GetLabel() {
				if l.GetName() == "collector" && l.GetValue() == "outbox" {
					ok = d.GetGauge().GetValue() == 1
				}
			}
		}
	}
	if !ok {
		t.Errorf("the outbox collector failed as the role:\n%s", logs.String())
	}
	if _, err := a.Stuck(ctx, "messages", 10); err != nil {
		t.Errorf("stuck rows as the role: %v", err)
	}
	for _, full := range []bool{false, true} {
		res, err := a.Reconcile.Run(ctx, "search_index", full)
		if err != nil {
			t.Errorf("reconcile (full %v) as the role: %v", full, err)
		} else if res.TotalGaps() != 0 || res.RowsChecked == 0 {
			t.Errorf("reconcile (full %v) as the role: %d rows checked, gaps %v", full, res.RowsChecked, res.Gaps)
		}
	}
}

func forbiddenFail(t *testing.T, appDSN, searchDSN string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, dsn := range []string{appDSN, searchDSN} {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		// The role's session defaults.
		for setting, want := range map[string]string{"default_transaction_read_only": "on", "statement_timeout": "10s",
			"lock_timeout": "2s", "idle_in_transaction_session_timeout": "1min"} {
			var got string
			if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil || got != want {
				t.Errorf("%s as the role: %q (%v), want %q", setting, got, err, want)
			}
		}
	}
	conn, err := pgx.Connect(ctx, appDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// What a config's SQL could do first: make the session read-write.
	// Each forbidden thing must then fail on privileges alone.
	if _, err := conn.Exec(ctx, `SELECT set_config('default_transaction_read_only', 'off', false)`); err != nil {
		t.Fatal(err)
	}
	for what, sql := range map[string]string{
		"insert":                   `INSERT INTO outbox (status) VALUES ('PENDING')`,
		"update":                   `UPDATE outbox SET status = 'PUBLISHED'`,
		"delete":                   `DELETE FROM outbox`,
		"truncate":                 `TRUNCATE outbox`,
		"read the payload":         `SELECT payload FROM outbox`,
		"read the message body":    `SELECT body FROM messages`,
		"nextval":                  `SELECT nextval('app_seq')`,
		"plpgsql that inserts":     `SELECT app_write()`,
		"create a table in public": `CREATE TABLE public.mine (x int)`,
		"create a temporary table": `CREATE TEMP TABLE mine (x int)`,
		"create a large object":    `SELECT lo_create(0)`,
		"lo_creat":                 `SELECT lo_creat(-1)`,
		"large object from bytea":  `SELECT lo_from_bytea(0, '\x01')`,
		"create a schema":          `CREATE SCHEMA mine`,
		"create a role":            `CREATE ROLE mine`,
		"create a database":        `CREATE DATABASE mine`,
		"read a server file":       `SELECT pg_read_file('/etc/hostname')`,
		"server-side lo_import":    `SELECT lo_import('/etc/hostname')`,
	} {
		_, err := conn.Exec(ctx, sql)
		if err == nil {
			t.Errorf("%s as the role (session read-write): allowed", what)
		} else if !strings.Contains(err.Error(), "permission denied") && !strings.Contains(err.Error(), "must be") {
			t.Errorf("%s as the role: refused for another reason than privileges: %v", what, err)
		}
	}
	var los int
	conn.QueryRow(ctx, `SELECT count(*) FROM pg_largeobject_metadata`).Scan(&los)
	var rows int
	conn.QueryRow(ctx, `SELECT count(*) FROM messages`).Scan(&rows)
	if rows != 20 || los != 0 {
		t.Errorf("after the attempts: %d messages (want 20), %d large objects", rows, los)
	}
}
