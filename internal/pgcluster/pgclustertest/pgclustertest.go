// Package pgclustertest starts throwaway PostgreSQL clusters for tests
// that need settings the shared test server does not have, with the pools
// such tests use. It is apart from internal/pgtest because it opens the
// exporter's fenced pools (internal/pg), whose own tests use pgtest.
package pgclustertest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
)

// Cluster is a throwaway server a test started for settings the shared
// one does not have (wal_level = logical, track_commit_timestamp), with a
// superuser pool for fixtures. The test's cleanup stops it.
type Cluster struct {
	*pgcluster.Cluster
	Admin *pgxpool.Pool
}

// Start starts a cluster with start (pgcluster.Start, or a wrapper
// that adds settings) and opens its superuser pool, failing the test with
// what (e.g. "a wal_level=logical cluster") when it cannot.
func Start(t testing.TB, what string, start func(context.Context) (*pgcluster.Cluster, error)) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := start(ctx)
	if err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop %s: %v", what, err)
		}
	})
	admin, err := pgxpool.New(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return &Cluster{Cluster: c, Admin: admin}
}

// ReadOnly opens the exporter's own fenced pool on database db of the
// cluster, as a config with that DSN would.
func (c *Cluster) ReadOnly(t testing.TB, db string, statementTimeout time.Duration) *pgxpool.Pool {
	t.Helper()
	ro, err := pg.Open(context.Background(), &config.Database{DSN: config.Secret(c.URL(db)), MaxConnections: 2,
		StatementTimeout: statementTimeout, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ro.Close)
	return ro
}

// StartStandby starts a hot standby streaming from c (pgcluster.StartStandby)
// with a superuser pool on it: the standby's sessions read, and a
// superuser may pause and resume replay (pg_wal_replay_pause,
// pg_wal_replay_resume). The test's cleanup stops it before c.
func (c *Cluster) StartStandby(t testing.TB) *Cluster {
	t.Helper()
	return Start(t, "a hot standby", func(ctx context.Context) (*pgcluster.Cluster, error) {
		return pgcluster.StartStandby(ctx, c.Cluster, pgcluster.Options{})
	})
}
