package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// A person running reconcile by hand is told on stderr how many findings
// no column dates are held and until when; --unconfirmed reports them at
// once, marked, in text and JSON, and does not hold them.
func TestReconcileHeldFindingsByHand(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE messages (id bigint PRIMARY KEY, version bigint NOT NULL, created_at timestamptz NOT NULL)`)
	db.Exec(t, `CREATE TABLE search_index (message_id bigint PRIMARY KEY, version bigint NOT NULL)`)
	db.Exec(t, `INSERT INTO messages SELECT i, 1, now() - interval '1 hour' FROM generate_series(1, 5) i`)
	// Key 6 is in the target only: its authority row was deleted, at an
	// unknown time, so the finding is held for grace.
	db.Exec(t, `INSERT INTO search_index SELECT i, 1 FROM generate_series(1, 6) i`)
	cfg := fmt.Sprintf(`
databases:
  main: {dsn: %q}
reconcile:
  idx:
    schedule: "@every 1h"
    grace: 1s
    authority: {database: main, table: messages, key: id, version: version, created_at: created_at}
    target: {database: main, table: search_index, key: message_id, version: version}
`, db.URL)
	cfgFile := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	reconcileRun := func(args ...string) (int, string, string) {
		var out, errOut syncBuffer
		code := run(context.Background(), append([]string{"reconcile", "--full", "--config.file=" + cfgFile}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	notice := regexp.MustCompile(`reconcile idx: holding 1 findings no column dates until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(grace 1s\)`)

	code, out, errOut := reconcileRun()
	if code != 1 || !notice.MatchString(errOut) || !strings.Contains(out, "orphan_target  6") || strings.Contains(out, "UNCONFIRMED") {
		t.Errorf("held run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = reconcileRun("--unconfirmed")
	if code != 1 || strings.Contains(errOut, "holding") || !regexp.MustCompile(`orphan_target +6 .*UNCONFIRMED`).MatchString(out) {
		t.Errorf("--unconfirmed: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = reconcileRun("--unconfirmed", "--format=json")
	if code != 1 || !strings.Contains(out, `"unconfirmed": true`) || !strings.Contains(out, `"reported_unconfirmed": 1`) {
		t.Errorf("--unconfirmed --format=json: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
