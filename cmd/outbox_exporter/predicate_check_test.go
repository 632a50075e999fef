package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// check has the server parse filter and unknown_when: one that is not a
// single boolean expression over the table fails check by its key, and
// nothing of it runs.
func TestCheckPreparesPredicates(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (id bigint, created_at timestamptz NOT NULL, attempts int);
CREATE TABLE written (n int);
CREATE FUNCTION write_one() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN INSERT INTO written VALUES (1); RETURN true; END$$;`)
	write := func(filter, unknownWhen string) string {
		cfg := fmt.Sprintf(`
databases:
  main:
    dsn: %q
outboxes:
  messages: {database: main, table: public.outbox, id: id, created_at: created_at, deadline: 5m,
    filter: %q, unknown_when: %q}
`, db.URL, filter, unknownWhen)
		path := filepath.Join(t.TempDir(), "config.yml")
		os.WriteFile(path, []byte(cfg), 0o600)
		return path
	}
	runCheck := func(path string) (int, string) {
		var out syncBuffer
		code := run(context.Background(), []string{"check", "--config.file=" + path}, &out, &out)
		return code, out.String()
	}
	code, out := runCheck(write("attempts + 1", "attempts > 3 attempts < 5"))
	if code != 1 {
		t.Errorf("check passed a non-boolean filter: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"outboxes.messages.filter is not one boolean expression over public.outbox: argument of WHERE must be type boolean",
		"outboxes.messages.unknown_when is not one boolean expression over public.outbox: syntax error",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	code, out = runCheck(write("write_one() AND attempts >= 0", "attempts > 3"))
	if strings.Contains(out, "not one boolean expression") {
		t.Errorf("check refused good predicates (exit %d):\n%s", code, out)
	}
	var n int
	db.Admin.QueryRow(context.Background(), `SELECT count(*) FROM written`).Scan(&n)
	if n != 0 {
		t.Errorf("check ran the predicate: %d rows written", n)
	}
}
