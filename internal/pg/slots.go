package pg

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/checktext"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Slots is what a server's connection slots look like to a client that is
// not a superuser.
type Slots struct {
	// Max is max_connections.
	Max int
	// Reserved is superuser_reserved_connections plus, from PostgreSQL
	// 16, reserved_connections: slots ordinary roles cannot take.
	Reserved int
	// InUse counts the client sessions open now that are not the
	// exporter's (application_name outbox_exporter).
	InUse int
}

// Free is how many more sessions an ordinary role could open now.
func (s Slots) Free() int { return max(0, s.Max-s.Reserved-s.InUse) }

// SessionsProblem says why a budget of sessions_per_server sessions may
// take the slots an application needs on a server, or "" if it fits in
// the free slots.
func SessionsProblem(budget int, s Slots) string {
	if budget <= s.Free() {
		return ""
	}
	return fmt.Sprintf("sessions_per_server %d is more than the %d free connection slots (max_connections %d, %d reserved, %d in use by others): at its busiest the exporter could take slots the application needs",
		budget, s.Free(), s.Max, s.Reserved, s.InUse)
}

// ReadSlots reads the server's connection slots through pool.
func ReadSlots(ctx context.Context, pool *pgxpool.Pool) (Slots, error) {
	var s Slots
	err := ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
			current_setting('superuser_reserved_connections')::int + coalesce(current_setting('reserved_connections', true)::int, 0),
			(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
				AND application_name IS DISTINCT FROM $1)::int`, ApplicationName).Scan(&s.Max, &s.Reserved, &s.InUse)
	})
	if err != nil {
		return Slots{}, fmt.Errorf("read the server's connection slots: %w", err)
	}
	return s, nil
}

// CheckSessions reads the slots of each server the configured databases
// are on (through the first database of each, by name) and returns one
// line per server: OK, WARN with SessionsProblem, or FAIL when they
// cannot be read. It is for `check`; a warning does not fail it.
func CheckSessions(ctx context.Context, cfg *config.Config, pools map[string]*pgxpool.Pool) []checktext.Report {
	first := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
		key, err := ServerOf(cfg.Databases[name])
		if err != nil {
			continue
		}
		if _, ok := first[key]; !ok {
			first[key] = name
		}
	}
	var out []checktext.Report
	for _, key := range slices.Sorted(maps.Keys(first)) {
		r := checktext.Report{Heading: "server " + key, OK: true}
		s, err := ReadSlots(ctx, pools[first[key]])
		switch {
		case err != nil:
			r.Items = append(r.Items, checktext.Item{What: "connection slots", OK: true, Warn: true,
				Detail: fmt.Sprintf("cannot read them through database %s: %v", first[key], err)})
		case SessionsProblem(cfg.SessionsPerServer, s) != "":
			r.Items = append(r.Items, checktext.Item{What: "sessions_per_server", OK: true, Warn: true, Detail: SessionsProblem(cfg.SessionsPerServer, s)})
		default:
			r.Items = append(r.Items, checktext.Item{What: "sessions_per_server", OK: true,
				Detail: fmt.Sprintf("%d within %d free connection slots", cfg.SessionsPerServer, s.Free())})
		}
		out = append(out, r)
	}
	return out
}
