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

// check fails while a reconcile job's tables lack the indexes its queries
// seek by, prints the statements that create them, and passes once they
// have run. A missing column is named.
func TestCheckReconcileIndexes(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE messages (id bigint NOT NULL, version int NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE search_index (message_id bigint NOT NULL, version int NOT NULL);`)
	cfg := fmt.Sprintf(`
databases:
  main:
    dsn: %q
reconcile:
  search_index:
    schedule: "@every 5m"
    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at}
    target: {database: main, table: public.search_index, key: message_id, version: version}
`, db.URL)
	path := filepath.Join(t.TempDir(), "config.yml")
	os.WriteFile(path, []byte(cfg), 0o600)
	runCheck := func() (int, string) {
		var out, errOut syncBuffer
		code := run(context.Background(), []string{"check", "--config.file=" + path}, &out, &errOut)
		return code, out.String() + errOut.String()
	}

	code, out := runCheck()
	if code != 1 || !strings.Contains(out, "reconcile search_index: NOT OK") {
		t.Fatalf("check without indexes: exit %d\n%s", code, out)
	}
	stmts := regexp.MustCompile(`(?m)^\s+(CREATE INDEX CONCURRENTLY .*;)$`).FindAllStringSubmatch(out, -1)
	if len(stmts) != 3 {
		t.Fatalf("want 3 statements (authority key, authority created_at, target key), got %d:\n%s", len(stmts), out)
	}
	for _, s := range stmts {
		db.Exec(t, s[1])
	}
	code, out = runCheck()
	if code != 0 || !strings.Contains(out, "reconcile search_index: OK") || !strings.Contains(out, "check: OK") {
		t.Fatalf("check after creating the indexes: exit %d\n%s", code, out)
	}
	// The indexes it asked for serve every query; a sweep would still read
	// the heap for versions and created_at, which a hint (not a failure)
	// says.
	authorityHint := "note a full sweep reads a heap page of authority public.messages for each row: an index on (id) INCLUDE (version, created_at)"
	targetHint := "note a full sweep reads a heap page of target public.search_index for each row: an index on (message_id) INCLUDE (version)"
	if !strings.Contains(out, authorityHint) || !strings.Contains(out, targetHint) {
		t.Fatalf("check without covering indexes: no hints\n%s", out)
	}
	db.Exec(t, `CREATE INDEX ON messages (id) INCLUDE (version, created_at)`)
	if code, out := runCheck(); code != 0 || strings.Contains(out, authorityHint) || !strings.Contains(out, targetHint) {
		t.Fatalf("check with the authority covered: exit %d, want the target's hint only\n%s", code, out)
	}
	// Running the printed statements again is harmless.
	for _, s := range stmts {
		db.Exec(t, s[1])
	}

	// Types and NULL-ability, not only names: a NULL-able version is
	// worth a hint, a version that is no integer and keys that cannot be
	// compared are failures.
	db.Exec(t, `ALTER TABLE search_index ALTER COLUMN version DROP NOT NULL`)
	if code, out := runCheck(); code != 0 || !strings.Contains(out, "note target table public.search_index column version may be NULL") {
		t.Fatalf("check with a NULL-able version: exit %d\n%s", code, out)
	}
	db.Exec(t, `ALTER TABLE messages ALTER COLUMN version TYPE numeric`)
	db.Exec(t, `ALTER TABLE search_index ALTER COLUMN message_id TYPE text`)
	code, out = runCheck()
	for _, w := range []string{"authority table public.messages column version is numeric: a version must be smallint, integer or bigint",
		"the target key is text and the authority key bigint: an integer key cannot be compared with a non-integer one"} {
		if code != 1 || !strings.Contains(out, w) {
			t.Errorf("check with wrong types: exit %d, want %q\n%s", code, w, out)
		}
	}
	db.Exec(t, `ALTER TABLE messages ALTER COLUMN version TYPE int USING version::int`)
	db.Exec(t, `ALTER TABLE search_index ALTER COLUMN message_id TYPE bigint USING message_id::bigint`)

	db.Exec(t, `ALTER TABLE search_index RENAME COLUMN version TO v`)
	if code, out := runCheck(); code != 1 || !strings.Contains(out, "target table public.search_index has no column version") {
		t.Fatalf("check with a missing column: exit %d\n%s", code, out)
	}
}
