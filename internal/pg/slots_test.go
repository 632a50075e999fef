package pg

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

func TestSessionsProblem(t *testing.T) {
	for _, c := range []struct {
		budget int
		s      Slots
		want   string // "" for no problem
	}{
		{4, Slots{Max: 100, Reserved: 3, InUse: 93}, ""},
		{4, Slots{Max: 100, Reserved: 3, InUse: 94}, "sessions_per_server 4 is more than the 3 free connection slots (max_connections 100, 3 reserved, 94 in use by others)"},
		{2, Slots{Max: 10, Reserved: 3, InUse: 20}, "more than the 0 free"},
		{4, Slots{Max: 12, Reserved: 3, InUse: 5}, ""},
	} {
		got := SessionsProblem(c.budget, c.s)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("SessionsProblem(%d, %+v) = %q, want %q", c.budget, c.s, got, c.want)
		}
	}
}

// ReadSlots reads the server's settings and counts the sessions open, not
// the exporter's own: a session of the test counts, one of the exporter's
// pools does not.
func TestReadSlots(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := NewBudgets(2)
	pool, closePool, err := OpenShared(ctx, fencedPool(t, db, 2), b)
	if err != nil {
		t.Fatal(err)
	}
	defer closePool()
	var max, reserved int
	if err := db.Admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int`).Scan(&max, &reserved); err != nil {
		t.Fatal(err)
	}
	// Hold a session of the test's admin pool and one of the exporter's
	// (ReadSlots's own) while reading.
	held, err := db.Admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	var others int
	s, err := ReadSlots(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := held.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND application_name <> $1`, ApplicationName).Scan(&others); err != nil {
		t.Fatal(err)
	}
	if s.Max != max || s.Reserved < reserved {
		t.Errorf("slots %+v, want max_connections %d and at least %d reserved", s, max, reserved)
	}
	// Other engineers' sessions come and go on the shared server: the
	// count must include the held one and lie near the count after it.
	if s.InUse < 1 || s.InUse > others+50 {
		t.Errorf("%d in use, want at least the held session and about %d", s.InUse, others)
	}
	cfg := &config.Config{Databases: map[string]*config.Database{"a": fencedPool(t, db, 2), "b": fencedPool(t, db, 2)}, SessionsPerServer: max}
	lines := CheckSessions(ctx, cfg, map[string]*pgxpool.Pool{"a": pool, "b": pool})
	if len(lines) != 1 || !lines[0].OK || !strings.Contains(lines[0].String(), "WARN sessions_per_server") {
		t.Errorf("a budget of max_connections on one server: %q, want one WARN line", lines)
	}
}
