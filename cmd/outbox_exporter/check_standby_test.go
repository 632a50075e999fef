package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster/pgclustertest"
)

// TestCheckSaysStandby: check warns about a database that is a hot
// standby (a real streaming replica), and only about that one; reading a
// replica is allowed, so check still passes.
func TestCheckSaysStandby(t *testing.T) {
	primary := pgclustertest.Start(t, "a primary", func(ctx context.Context) (*pgcluster.Cluster, error) {
		return pgcluster.Start(ctx, pgcluster.Options{})
	})
	standby := primary.StartStandby(t)
	cfg := fmt.Sprintf(`
databases:
  main:
    dsn: %q
  replica:
    dsn: %q
`, primary.URL("postgres"), standby.URL("postgres"))
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuffer
	code := run(context.Background(), []string{"check", "--config.file=" + path}, &out, &errOut)
	got := out.String() + errOut.String()
	// Databases are checked in name order: main's report ends where
	// replica's begins, and only replica's carries the warning.
	mainAt, replicaAt := strings.Index(got, "database main ("), strings.Index(got, "database replica (")
	warn := strings.Index(got, "WARN standby: reads a hot standby in recovery")
	if code != 0 || mainAt < 0 || replicaAt < mainAt || warn < replicaAt ||
		strings.Count(got, "WARN standby") != 1 {
		t.Fatalf("check of a primary and its standby: exit %d\n%s", code, got)
	}
}
