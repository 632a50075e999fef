package libraries

import (
	"archive/zip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// clockSQL gives the sessions a now() the test sets: rows are written at
// known times before it, so that every age the exporter reports is exact
// and the truth can be computed at the same instant. Everything else is
// the real server running the exporter's own queries.
const clockSQL = `CREATE SCHEMA fakeclock;
CREATE TABLE fakeclock.clock (t timestamptz NOT NULL);
INSERT INTO fakeclock.clock VALUES ('2030-01-01 00:00:00+00');
CREATE FUNCTION fakeclock.now() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT t FROM fakeclock.clock $$;`

// rig is one database holding a library's tables, and a read-only pool
// whose sessions see the test's clock.
type rig struct {
	db   *pgtest.DB
	pool *pgxpool.Pool
}

func newRig(t testing.TB, fixture string) *rig {
	t.Helper()
	return newRigSQL(t, ddl(t, fixture))
}

// newRigSQL is a rig whose database holds the tables schema creates ("" for
// none: the library creates its own).
func newRigSQL(t testing.TB, schema string) *rig {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, clockSQL)
	if schema != "" {
		db.Exec(t, schema)
	}
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", "fakeclock,pg_catalog,public")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pg.Open(ctx, &config.Database{DSN: config.Secret(u.String()), MaxConnections: 2,
		StatementTimeout: 10 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &rig{db: db, pool: pool}
}

// readFixture is a DDL file under testdata/, with Flyway's placeholders
// as a default install fills them (Eventuate's table suffix is empty).
func readFixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ddl is a fixture as the library's installer runs it.
func ddl(t testing.TB, name string) string {
	return strings.ReplaceAll(readFixture(t, name), "${EVENTUATE_OUTBOX_SUFFIX}", "")
}

// fixtureBody is a fixture without its origin comment: the lines up to
// the first blank one.
func fixtureBody(s string) string {
	_, body, _ := strings.Cut(s, "\n\n")
	return body
}

// jarEntry reads one file out of a jar fetched by scripts/deps.sh.
func jarEntry(t *testing.T, jar, entry string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join("..", ".cache", "libraries-*", "libs", jar))
	if len(matches) == 0 {
		t.Fatalf("%s is not under .cache/libraries-*/libs: run scripts/deps.sh", jar)
	}
	z, err := zip.OpenReader(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	f, err := z.Open(entry)
	if err != nil {
		t.Fatalf("%s: %v", jar, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// outboxFor parses a config of one outbox "events" with the preset and
// the extra keys.
func outboxFor(t testing.TB, preset, extra string) *config.Outbox {
	t.Helper()
	y := fmt.Sprintf("databases:\n  main:\n    dsn: postgres://x@127.0.0.1/app\noutboxes:\n  events:\n    database: main\n    preset: %s\n    deadline: 5m\n%s", preset, extra)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Outboxes["events"]
}

// metrics is one collection, by series key: name{label="v",...}.
type metrics map[string]float64

var fqNameRe = regexp.MustCompile(`fqName: "([^"]+)"`)

func collect(t testing.TB, c *outbox.Collector) metrics {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch := make(chan prometheus.Metric, 10000)
	if err := c.Update(ctx, ch); err != nil {
		t.Fatalf("collect: %v", err)
	}
	close(ch)
	out := metrics{}
	for m := range ch {
		name := fqNameRe.FindStringSubmatch(m.Desc().String())[1]
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range pb.Label {
			labels[l.GetName()] = l.GetValue()
		}
		switch {
		case pb.Gauge != nil:
			out[key(name, labels)] = pb.Gauge.GetValue()
		case pb.Counter != nil:
			out[key(name, labels)] = pb.Counter.GetValue()
		case pb.Histogram != nil:
			out[key(name+"_count", labels)] = float64(pb.Histogram.GetSampleCount())
			out[key(name+"_sum", labels)] = pb.Histogram.GetSampleSum()
		}
	}
	return out
}

func key(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + fmt.Sprintf("%q", labels[k])
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

func newCollector(r *rig, o *config.Outbox) *outbox.Collector {
	return outbox.NewCollector("events", o, r.pool, slog.New(slog.DiscardHandler))
}

// setClock moves the sessions' now() to t.
func (r *rig) setClock(tb testing.TB, at time.Time) {
	r.db.Exec(tb, "UPDATE fakeclock.clock SET t = $1", at)
}
