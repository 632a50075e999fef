package cdc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

func roleDB(t *testing.T, s *server, role string) *pgxpool.Pool {
	t.Helper()
	u := strings.Replace(s.cluster.URL("postgres"), "postgres@", role+"@", 1)
	p, err := pg.Open(context.Background(), &config.Database{DSN: config.Secret(u), MaxConnections: 1, StatementTimeout: 5 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func runCheck(t *testing.T, db pg.Beginner, e *config.CDC, o *config.Outbox) *CheckReport {
	t.Helper()
	r, err := Check(context.Background(), db, "orders", e, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// check names the grant a role lacks, a missing or physical slot, and
// what it cannot see with the server's settings.
func TestCheck(t *testing.T) {
	s := startServer(t, cdctest.Options{Settings: map[string]string{"track_commit_timestamp": "on", "max_slot_wal_keep_size": "64MB"}})
	s.exec(t, `CREATE ROLE mon LOGIN`)
	s.exec(t, `REVOKE SELECT ON pg_catalog.pg_replication_slots FROM PUBLIC`)
	s.exec(t, `REVOKE EXECUTE ON FUNCTION pg_catalog.pg_control_checkpoint() FROM PUBLIC`)
	mon := roleDB(t, s, "mon")
	outbox := &config.Outbox{Table: "outbox", CreatedAt: "created_at"}
	e := &config.CDC{Database: "main", Slot: "debezium", Deadline: time.Minute, Outbox: "outbox"}

	r := runCheck(t, mon, e, outbox)
	if r.OK || !strings.Contains(r.Text(), `GRANT SELECT ON pg_catalog.pg_replication_slots TO "mon";`) {
		t.Errorf("without the grant:\n%s", r.Text())
	}
	s.exec(t, `GRANT SELECT ON pg_catalog.pg_replication_slots TO mon`)
	if r = runCheck(t, mon, e, outbox); r.OK || !strings.Contains(r.Text(), `FAIL slot exists: no replication slot "debezium"`) {
		t.Errorf("missing slot:\n%s", r.Text())
	}
	s.exec(t, `SELECT pg_create_physical_replication_slot('debezium')`)
	if r = runCheck(t, mon, e, outbox); r.OK || !strings.Contains(r.Text(), `slot "debezium" is physical`) {
		t.Errorf("physical slot:\n%s", r.Text())
	}
	s.exec(t, `SELECT pg_drop_replication_slot('debezium')`)
	s.exec(t, `SELECT pg_create_logical_replication_slot('debezium', 'pgoutput')`)
	// The outbox's table: without an index leading with created_at the
	// rows behind the slot would be a scan of the table.
	if r = runCheck(t, mon, e, outbox); r.OK || !strings.Contains(r.Text(), "FAIL index on created_at: table outbox of outbox outbox does not exist") {
		t.Errorf("no outbox table:\n%s", r.Text())
	}
	s.exec(t, `CREATE TABLE outbox (id bigint, kind text, created_at timestamptz); CREATE INDEX outbox_kind ON outbox (kind, created_at);
		CREATE INDEX outbox_recent ON outbox (created_at) WHERE kind = 'x'; GRANT SELECT ON outbox TO mon`)
	if r = runCheck(t, mon, e, outbox); r.OK || !strings.Contains(r.Text(), `no index of outbox leads with created_at`) ||
		!strings.Contains(r.Text(), `CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_exporter_outbox_behind" ON "outbox" ("created_at");`) {
		t.Errorf("no index on created_at:\n%s", r.Text())
	}
	s.exec(t, `CREATE INDEX outbox_created ON outbox (created_at)`)
	r = runCheck(t, mon, e, outbox)
	if !r.OK || !strings.Contains(r.Text(), "ok   slot is logical: plugin pgoutput on database postgres") ||
		!strings.Contains(r.Text(), "ok   track_commit_timestamp: on") || !strings.Contains(r.Text(), "may not run pg_control_checkpoint()") ||
		!strings.Contains(r.Text(), "ok   index on created_at: outbox_created") {
		t.Errorf("a good slot:\n%s", r.Text())
	}
	if strings.Contains(r.Text(), "unlimited") {
		t.Errorf("max_slot_wal_keep_size is set, yet:\n%s", r.Text())
	}
}

// Without track_commit_timestamp check says which outbox's rows cannot be
// judged against the slot; without max_slot_wal_keep_size it says lost
// cannot happen.
func TestCheckWithoutCommitTimestamps(t *testing.T) {
	s := startServer(t, cdctest.Options{})
	s.exec(t, `SELECT pg_create_logical_replication_slot('debezium', 'pgoutput')`)
	e := &config.CDC{Database: "main", Slot: "debezium", Deadline: time.Minute, Outbox: "events"}
	r := runCheck(t, s.ro, e, &config.Outbox{Table: "events", CreatedAt: "created_at"})
	text := r.Text()
	if r.OK || !strings.Contains(text, "FAIL track_commit_timestamp: off: the exporter cannot see which rows of outbox events are still behind the slot") ||
		!strings.Contains(text, "max_slot_wal_keep_size is unlimited") {
		t.Errorf("commit timestamps off:\n%s", text)
	}
	// Without an outbox to judge, the setting does not matter.
	e.Outbox = ""
	if r = runCheck(t, s.ro, e, nil); !r.OK {
		t.Errorf("no outbox linked:\n%s", r.Text())
	}
}
