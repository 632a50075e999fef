// Package cdctest starts throwaway PostgreSQL clusters with wal_level =
// logical for the cdc tests and benchmark: the shared test server runs
// with wal_level = replica, and a slot's WAL limits are server settings a
// test must choose.
package cdctest

import (
	"context"
	"maps"

	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
)

// Cluster is a running throwaway PostgreSQL server, a child of this
// process, in a temporary folder that Stop removes.
type Cluster = pgcluster.Cluster

// Options are the server settings a test chooses: Settings over the
// logical-replication defaults, and WALSegmentMB.
type Options = pgcluster.Options

// Start starts a cluster with wal_level = logical and room for slots and
// WAL senders, and returns once it accepts connections.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	settings := map[string]string{"wal_level": "logical", "max_replication_slots": "40", "max_wal_senders": "20"}
	maps.Copy(settings, o.Settings)
	o.Settings = settings
	if o.Prefix == "" {
		o.Prefix = "outbox-cdc-pg-"
	}
	return pgcluster.Start(ctx, o)
}
