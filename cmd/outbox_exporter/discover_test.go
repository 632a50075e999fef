package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// TestDiscoverExitCodes: 0 when an outbox table is found, 1 when none, 2
// on an error; the DSN, password included, is never printed.
func TestDiscoverExitCodes(t *testing.T) {
	empty := pgtest.New(t)
	full := pgtest.New(t)
	full.Exec(t, `CREATE TABLE app_outbox (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, published_at timestamptz)`)
	withPassword := func(dsn string) string {
		u, _ := url.Parse(dsn)
		u.User = url.UserPassword(u.User.Username(), "s3cret-pw")
		return u.String()
	}
	cfgFile := filepath.Join(t.TempDir(), "c.yml")
	if err := os.WriteFile(cfgFile, []byte("databases:\n  app:\n    dsn: "+withPassword(full.URL)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"found", []string{"discover", "--dsn", withPassword(full.URL)}, 0, "table: public.app_outbox"},
		{"found from a config file", []string{"discover", "--config.file", cfgFile}, 0, "database: app"},
		{"none", []string{"discover", "--dsn", withPassword(empty.URL)}, 1, "no outbox table found"},
		{"unreachable", []string{"discover", "--dsn", "postgres://u:s3cret-pw@127.0.0.1:1/x?connect_timeout=2"}, 2, "database main"},
		{"both", []string{"discover", "--dsn", full.URL, "--config.file", cfgFile}, 2, "not both"},
		{"neither", []string{"discover"}, 2, "--dsn or --config.file is required"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut)
		all := out.String() + errOut.String()
		if code != tc.code || !strings.Contains(all, tc.out) {
			t.Errorf("%s: exit %d, want %d, output lacks %q:\n%s", tc.name, code, tc.code, tc.out, all)
		}
		if strings.Contains(all, "s3cret-pw") {
			t.Errorf("%s: the password was printed:\n%s", tc.name, all)
		}
	}
}
