package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// LeaseKeepalive is how the server notices a lease session whose client
// went silent (a partition, a frozen host): it probes after Idle without a
// packet, Count times Interval apart, and drops the session (releasing its
// advisory locks) when none is answered; TCP user timeout bounds data the
// client never acknowledges the same way. Over a Unix socket the server
// ignores them.
type LeaseKeepalive struct {
	Idle, Interval time.Duration
	Count          int
}

// Total is the least time the server keeps a silent session.
func (k LeaseKeepalive) Total() time.Duration { return k.Idle + time.Duration(k.Count)*k.Interval }

// OpenLeaseSession opens the one session a replica holds on db's server
// for leader election: every lease session the exporter opens is opened
// here, so that a per-server session budget can count it (one per
// replica, beside the pool's max_connections). It is read-only and fenced
// as the pools' sessions are (advisory locks need neither a write nor a
// privilege), carries appName so that other replicas can tell who leads,
// and has ka set as run-time parameters.
//
// With budgets (nil: none) the session counts against the per-server
// session budget like the pools' sessions, from its dial to its close.
func OpenLeaseSession(ctx context.Context, db *config.Database, appName string, ka LeaseKeepalive, budgets *Budgets) (*pgx.Conn, error) {
	pc, err := PoolConfig(db)
	if err != nil {
		return nil, err
	}
	cc := pc.ConnConfig
	if budgets != nil {
		budgets.countDials(cc)
	}
	rp := cc.RuntimeParams
	rp["application_name"] = appName
	rp["tcp_keepalives_idle"] = fmt.Sprint(int(ka.Idle.Seconds()))
	rp["tcp_keepalives_interval"] = fmt.Sprint(int(ka.Interval.Seconds()))
	rp["tcp_keepalives_count"] = fmt.Sprint(ka.Count)
	rp["tcp_user_timeout"] = fmt.Sprint(ka.Total().Milliseconds())
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("open lease session on %s: %w", config.RedactDSN(db.DSN.Reveal()), err)
	}
	return conn, nil
}
