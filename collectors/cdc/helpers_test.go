package cdc

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster/pgclustertest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// server is a throwaway wal_level = logical cluster with a superuser pool
// for fixtures (the test plays the application and the connector) and
// the exporter's own read-only pool.
type server struct {
	cluster *cdctest.Cluster
	admin   *pgxpool.Pool
	ro      *pgxpool.Pool
}

func startServer(t *testing.T, o cdctest.Options) *server {
	t.Helper()
	c := pgclustertest.Start(t, "a wal_level=logical cluster", func(ctx context.Context) (*cdctest.Cluster, error) {
		return cdctest.Start(ctx, o)
	})
	return &server{cluster: c.Cluster, admin: c.Admin, ro: c.ReadOnly(t, "postgres", 5*time.Second)}
}

func (s *server) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := s.admin.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// position is the server's clock and WAL position now, read by the test.
func (s *server) position(t *testing.T) Sample {
	t.Helper()
	var (
		at  time.Time
		lsn string
	)
	if err := s.admin.QueryRow(context.Background(), `SELECT clock_timestamp(), pg_current_wal_lsn()::text`).Scan(&at, &lsn); err != nil {
		t.Fatal(err)
	}
	l, err := ParseLSN(lsn)
	if err != nil {
		t.Fatal(err)
	}
	return Sample{At: at, LSN: l}
}

// confirmed is a slot's confirmed_flush_lsn, read by the test.
func (s *server) confirmed(t *testing.T, slot string) LSN {
	t.Helper()
	var lsn string
	if err := s.admin.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	l, err := ParseLSN(lsn)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// metrics is one Update's output keyed "name{label=value,...}" with
// labels sorted, and the Update's error.
type metrics map[string]float64

func collect(t *testing.T, c *Collector) (metrics, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan prometheus.Metric, 256)
	err := c.Update(ctx, ch)
	close(ch)
	out := metrics{}
	for m := range ch {
		out[key(t, m)] = testutil.MetricValue(t, m)
	}
	return out, err
}

func key(t *testing.T, m prometheus.Metric) string {
	d := m.Desc().String()
	i := strings.Index(d, `fqName: "`) + len(`fqName: "`)
	name := d[i : i+strings.Index(d[i:], `"`)]
	var ls []string
	for _, l := range []string{"cdc", "status"} {
		if v := testutil.LabelOf(t, m, l); v != "" {
			ls = append(ls, l+"="+v)
		}
	}
	sort.Strings(ls)
	return fmt.Sprintf("%s{%s}", name, strings.Join(ls, ","))
}

// get fails the test when the metric is missing.
func (m metrics) get(t *testing.T, name, cdc string, extra ...string) float64 {
	t.Helper()
	ls := append([]string{"cdc=" + cdc}, extra...)
	sort.Strings(ls)
	k := fmt.Sprintf("%s{%s}", name, strings.Join(ls, ","))
	v, ok := m[k]
	if !ok {
		t.Fatalf("no %s in %v", k, m)
	}
	return v
}

func newCollector(s *server, entries map[string]*config.CDC) *Collector {
	return NewCollector("main", entries, s.ro, testutil.Quiet())
}

// waitFor polls cond until it holds or the deadline passes; the verdict
// never depends on how fast the machine is.
func waitFor(t *testing.T, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, d, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
