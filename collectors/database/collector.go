// Package database collects what the exporter reads about each configured
// database itself, apart from any outbox in it: whether it is a hot
// standby in recovery, and how far its replay is behind. Many teams point
// exporters at a replica; every outbox age and counter read there is as
// old as the replica's replay, so these gauges say how much to trust them.
package database

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

var (
	inRecoveryDesc = prometheus.NewDesc(vocab.DatabaseInRecovery,
		"1 while the configured database is a hot standby in recovery: its outbox ages, counts and counters show the primary as of outbox_database_replay_lag_seconds ago.",
		[]string{vocab.LabelDatabase}, nil)
	replayLagDesc = prometheus.NewDesc(vocab.DatabaseReplayLag,
		"How far a standby's replay is behind: now minus the commit time of the last transaction it replayed, while WAL it has received (or, without a WAL receiver, any WAL) waits to be replayed; 0 when it has replayed all it received, and 0 on a primary. An upper bound when the primary was idle before the waiting WAL.",
		[]string{vocab.LabelDatabase}, nil)
)

// Collector reads one configured database's recovery state.
type Collector struct {
	name string
	db   pg.Beginner
	// server, when set, shares the server's reads with the collectors
	// of its other databases (Servers).
	server *server
	// ride is how long a read waits for the round of the database's
	// other collections.
	ride time.Duration
}

// NewCollector returns the collector of database name, reading through db
// (a pool from pg.Open) on its own; Servers.Collector shares the reads of
// one server's databases.
func NewCollector(name string, db pg.Beginner) *Collector {
	return &Collector{name: name, db: db, ride: ride}
}

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "database" }

// Target implements collectors.Collector.
func (c *Collector) Target() string { return c.name }

// Describe implements collectors.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inRecoveryDesc
	ch <- replayLagDesc
}

// Update implements collectors.Collector.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	var st State
	var err error
	if c.server != nil {
		st, err = c.server.read(ctx, c.db, c.ride)
	} else {
		st, err = read(ctx, c.db, c.ride)
	}
	if err != nil {
		return fmt.Errorf("database %q: %w", c.name, err)
	}
	rec := 0.0
	if st.InRecovery {
		rec = 1
	}
	ch <- prometheus.MustNewConstMetric(inRecoveryDesc, prometheus.GaugeValue, rec, c.name)
	ch <- prometheus.MustNewConstMetric(replayLagDesc, prometheus.GaugeValue, st.ReplayLag().Seconds(), c.name)
	return nil
}

// State is a database's recovery state at one moment.
type State struct {
	InRecovery bool
	// Now is the server's now().
	Now time.Time
	// StartedAt is when the server started (pg_postmaster_start_time).
	StartedAt time.Time
	// ReplayedAt is the commit time of the last transaction replayed
	// since the server started; nil when none was.
	ReplayedAt *time.Time
	// CaughtUp: the standby has replayed all the WAL its receiver has
	// received. False without a WAL receiver (archive recovery).
	CaughtUp bool
	// Paused: replay is paused (pg_wal_replay_pause).
	Paused bool
}

// stateQuery reads State; the recovery functions are asked only in
// recovery, where they are defined.
const stateQuery = `SELECT pg_is_in_recovery(), now(), pg_postmaster_start_time(),
	CASE WHEN pg_is_in_recovery() THEN pg_last_xact_replay_timestamp() END,
	CASE WHEN pg_is_in_recovery() THEN coalesce(pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn(), false) END,
	CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() END`

// ride is how long a scrape's read of the recovery state waits for the
// round of the database's outbox collections, which start in the same
// scrape, to go in their transaction (pg.Job.Ride) rather than in one of
// its own; a database with none waits that long for nothing.
const ride = 100 * time.Millisecond

// Read reads db's recovery state in a read-only transaction: from a
// pool, in the round of its database's collections (pg.Rounds).
func Read(ctx context.Context, db pg.Beginner) (State, error) {
	return read(ctx, db, 0)
}

// read is Read, riding for up to wait in the next round of the
// database's other collections.
func read(ctx context.Context, db pg.Beginner, wait time.Duration) (State, error) {
	var st State
	var caught, paused *bool
	err := pg.RideInRound(ctx, db, wait, func() *pgx.Batch {
		b := &pgx.Batch{}
		// Sent unnamed at every scrape: it reads no table, so planning
		// it costs the server next to nothing, and preparing it would
		// cost each new session an exchange (pg.Unprepared).
		b.Queue(stateQuery, pg.Unprepared).QueryRow(func(row pgx.Row) error {
			return row.Scan(&st.InRecovery, &st.Now, &st.StartedAt, &st.ReplayedAt, &caught, &paused)
		})
		return b
	})
	if err != nil {
		return State{}, fmt.Errorf("read recovery state: %w", err)
	}
	st.CaughtUp = caught != nil && *caught
	st.Paused = paused != nil && *paused
	return st, nil
}

// ReplayLag is how far the standby's data is behind now: 0 on a primary
// or a standby that replayed all it received; else now minus the commit
// time of the last replayed transaction, or minus the server's start when
// none was replayed since (its data is at least that old). It errs
// towards more lag, never less.
func (s State) ReplayLag() time.Duration {
	if !s.InRecovery || s.CaughtUp {
		return 0
	}
	from := s.StartedAt
	if s.ReplayedAt != nil {
		from = *s.ReplayedAt
	}
	if d := s.Now.Sub(from); d > 0 {
		return d
	}
	return 0
}

// Describe is one line for a person: what the database is and how far
// behind its replay is.
func (s State) Describe() string {
	if !s.InRecovery {
		return "a primary (not in recovery)"
	}
	paused := ""
	if s.Paused {
		paused = ", replay paused"
	}
	return fmt.Sprintf("a hot standby in recovery%s, replay %s behind: outbox ages and counters trail the primary by as much",
		paused, s.ReplayLag().Round(time.Millisecond))
}
