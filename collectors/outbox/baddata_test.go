package outbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// Bad data in a monitored outbox: each test states the behaviour it
// proves, which the README documents.

// bdSchema is obStatusSchema but lets created_at be NULL, as some real
// outboxes do.
var bdSchema = strings.Replace(obStatusSchema, "created_at timestamptz NOT NULL DEFAULT now()", "created_at timestamptz DEFAULT now()", 1)

// bdScrapeAll runs every metric through an Exporter, as a scrape does,
// and returns them with the success of outbox messages.
func bdScrapeAll(t *testing.T, e *collectors.Exporter) ([]prometheus.Metric, float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms := e.Collect(ctx)
	success := -1.0
	for _, m := range ms {
		if !testutil.IsMetric(m, "outbox_exporter_collector_success") || testutil.LabelOf(t, m, "target") != "messages" {
			continue
		}
		success = testutil.MetricValue(t, m)
	}
	if success < 0 {
		t.Fatal("no outbox_exporter_collector_success in the collection")
	}
	return ms, success
}

// bdGather registers the metrics in a registry and gathers them as
// promhttp does, so that whatever the registry refuses is an error here.
func bdGather(t *testing.T, ms []prometheus.Metric) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(obStatic(ms))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return mfs
}

// bdLog is a logger whose output a test can read.
type bdLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *bdLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *bdLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *bdLog) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// A NULL created_at: the row counts in its state (pending here), but it
// has no age, so it is never past its deadline and does not move
// outbox_oldest_pending_age_seconds. A label combination whose only
// unpublished rows have NULL created_at shows an oldest age of 0. The
// scrape succeeds; the stuck-rows API lists such rows with age 0, not
// past their deadline.
func TestOutboxBadDataNullCreatedAt(t *testing.T) {
	db, pool, _ := obSetup(t, bdSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic) VALUES
	  (NULL, 'a', 't'), (NULL, 'a', 't'), (now() - interval '2 minutes', 'a', 't'),
	  (NULL, 'b', 't')`)
	e := collectors.NewExporter(testutil.Quiet(), NewCollector("messages", obStatusOutbox(), pool, testutil.Quiet()))
	ms, ok := bdScrapeAll(t, e)
	if ok != 1 {
		t.Fatalf("collector_success = %v with NULL created_at, want 1", ok)
	}
	bdGather(t, ms)
	if v := obValue(t, ms, "outbox_events", map[string]string{"event_type": "a", "state": "pending"}); v != 3 {
		t.Errorf("pending a = %v, want 3 (NULL created_at rows still count)", v)
	}
	obNear(t, "oldest a", obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "a"}), 120, 5)
	if v := obValue(t, ms, "outbox_past_deadline_events", map[string]string{"event_type": "a"}); v != 0 {
		t.Errorf("past deadline a = %v, want 0", v)
	}
	if v := obValue(t, ms, "outbox_events", map[string]string{"event_type": "b", "state": "pending"}); v != 1 {
		t.Errorf("pending b = %v, want 1", v)
	}
	if v := obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "b"}); v != 0 {
		t.Errorf("oldest b (only a NULL created_at) = %v, want 0", v)
	}
	rows, err := Stuck(context.Background(), pool, "messages", obStatusOutbox(), 10)
	if err != nil {
		t.Fatalf("stuck rows with NULL created_at: %v", err)
	}
	if len(rows) != 4 {
		t.Fatalf("stuck rows = %d, want 4", len(rows))
	}
	nulls := 0
	for _, r := range rows {
		if r.AgeSeconds == 0 && !r.PastDeadline {
			nulls++
		}
	}
	if nulls != 3 {
		t.Errorf("stuck rows with age 0 and not past deadline = %d, want the 3 NULL created_at rows: %+v", nulls, rows)
	}
}

// A created_at in the future (a writer's clock ahead of the database's):
// the row counts in its state, is not past its deadline, and its age is
// taken as 0, never negative, in the metrics and the stuck-rows API.
func TestOutboxBadDataFutureCreatedAt(t *testing.T) {
	db, pool, _ := obSetup(t, bdSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic) VALUES
	  (now() + interval '1 hour', 'a', 't'), (now() + interval '10 minutes', 'a', 't')`)
	e := collectors.NewExporter(testutil.Quiet(), NewCollector("messages", obStatusOutbox(), pool, testutil.Quiet()))
	ms, ok := bdScrapeAll(t, e)
	if ok != 1 {
		t.Fatalf("collector_success = %v with future created_at, want 1", ok)
	}
	bdGather(t, ms)
	if v := obValue(t, ms, "outbox_events", map[string]string{"event_type": "a", "state": "pending"}); v != 2 {
		t.Errorf("pending = %v, want 2", v)
	}
	if v := obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "a"}); v != 0 {
		t.Errorf("oldest = %v, want 0", v)
	}
	if v := obValue(t, ms, "outbox_past_deadline_events", map[string]string{"event_type": "a"}); v != 0 {
		t.Errorf("past deadline = %v, want 0", v)
	}
	rows, err := Stuck(context.Background(), pool, "messages", obStatusOutbox(), 10)
	if err != nil {
		t.Fatalf("stuck rows with future created_at: %v", err)
	}
	if len(rows) != 2 {
		t.Fatalf("stuck rows = %d, want 2", len(rows))
	}
	for _, r := range rows {
		if r.AgeSeconds != 0 || r.PastDeadline {
			t.Errorf("stuck row %s: age %v past deadline %v, want age 0 and not past deadline", r.ID, r.AgeSeconds, r.PastDeadline)
		}
	}
}

// A 1 MB last_error: the scrape never reads it; the stuck-rows API
// answers its first 200 characters (outbox.LastErrorChars), valid UTF-8,
// and reads no more than that from the database.
func TestOutboxBadDataHugeLastError(t *testing.T) {
	db, pool, _ := obSetup(t, bdSchema)
	// 'é' is two bytes: a cut by bytes would split it.
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic, last_error, attempts) VALUES
	  (now() - interval '1 minute', 'a', 't', repeat('é', 524288), 3)`)
	e := collectors.NewExporter(testutil.Quiet(), NewCollector("messages", obStatusOutbox(), pool, testutil.Quiet()))
	ms, ok := bdScrapeAll(t, e)
	if ok != 1 {
		t.Fatalf("collector_success = %v with a 1 MB last_error, want 1", ok)
	}
	bdGather(t, ms)
	rows, err := Stuck(context.Background(), pool, "messages", obStatusOutbox(), 10)
	if err != nil {
		t.Fatalf("stuck rows: %v", err)
	}
	if len(rows) != 1 {
		t.Fatalf("stuck rows = %d, want 1", len(rows))
	}
	le := rows[0].LastError
	if n := utf8.RuneCountInString(le); n != LastErrorChars || !utf8.ValidString(le) || le != strings.Repeat("é", LastErrorChars) {
		t.Errorf("last_error: %d characters, valid %v; want the first %d characters", n, utf8.ValidString(le), LastErrorChars)
	}
	if b, err := json.Marshal(rows); err != nil || len(b) > 2000 {
		t.Errorf("stuck JSON: %d bytes, err %v; want a short answer", len(b), err)
	}
}

// asciiDB creates a database with encoding SQL_ASCII, where text may hold
// any bytes, and drops it after the test.
func asciiDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "oxt_ascii_" + hex.EncodeToString(b)
	server, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatalf("connect to %s: %v", pgtest.ServerURL(), err)
	}
	defer server.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := server.Exec(ctx, "CREATE DATABASE "+ident+" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"); err != nil {
		t.Fatalf("create SQL_ASCII database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		server, err := pgx.Connect(ctx, pgtest.ServerURL())
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer server.Close(ctx)
		if _, err := server.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	admin, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return u.String(), admin
}

// Label values that are not valid UTF-8 (text in a SQL_ASCII database
// holds any bytes): the scrape succeeds and does not panic; each invalid
// byte sequence is replaced by U+FFFD, so the values stay distinct series
// where they differ in their valid parts, and the answer is valid
// exposition. The stuck-rows API does the same to labels and last_error.
func TestOutboxBadDataInvalidUTF8Labels(t *testing.T) {
	dsn, admin := asciiDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, bdSchema); err != nil {
		t.Fatal(err)
	}
	// Raw bytes through the simple protocol: \xff and a lone \xc3 are not
	// UTF-8.
	if _, err := admin.Exec(ctx, `INSERT INTO outbox (created_at, event_type, topic, last_error) VALUES
	  (now() - interval '1 minute', E'order\xff.paid', E'top\xc3', E'bad \xfe error'),
	  (now() - interval '2 minutes', E'order\xfe.paid', E'top\xc3', NULL),
	  (now() - interval '30 seconds', 'order.ok', 't', NULL)`, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("insert invalid bytes: %v", err)
	}
	pool, err := pg.Open(ctx, &config.Database{DSN: config.Secret(dsn), MaxConnections: 2,
		StatementTimeout: 30 * time.Second, LockTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var log bdLog
	e := collectors.NewExporter(log.logger(), NewCollector("messages", obStatusOutbox(), pool, log.logger()))
	var ms []prometheus.Metric
	var ok float64
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("scrape panicked on invalid UTF-8 labels: %v", r)
			}
		}()
		ms, ok = bdScrapeAll(t, e)
	}()
	if ok != 1 {
		t.Fatalf("collector_success = %v with invalid UTF-8 labels, want 1", ok)
	}
	bdGather(t, ms)
	if v := obValue(t, ms, "outbox_events", map[string]string{"event_type": "order\uFFFD.paid", "destination": "top\uFFFD", "state": "pending"}); v != 2 {
		t.Errorf("pending of the invalid-UTF-8 labels = %v, want 2 (both values fold into one)", v)
	}
	if v := obValue(t, ms, "outbox_events", map[string]string{"event_type": "order.ok", "state": "pending"}); v != 1 {
		t.Errorf("pending of the valid labels = %v, want 1", v)
	}
	rows, err := Stuck(ctx, pool, "messages", obStatusOutbox(), 10)
	if err != nil {
		t.Fatalf("stuck rows: %v", err)
	}
	for _, r := range rows {
		for k, v := range r.Labels {
			if !utf8.ValidString(v) {
				t.Errorf("stuck row %s label %s = %q, not valid UTF-8", r.ID, k, v)
			}
		}
		if !utf8.ValidString(r.LastError) {
			t.Errorf("stuck row %s last_error %q, not valid UTF-8", r.ID, r.LastError)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("stuck rows = %d, want 3", len(rows))
	}
	// Oldest first: the row with \xfe, then the one with \xff and last_error.
	if rows[1].Labels["event_type"] != "order\uFFFD.paid" || rows[1].LastError != "bad \uFFFD error" {
		t.Errorf("stuck row %s: labels %q last_error %q, want invalid bytes replaced by U+FFFD", rows[1].ID, rows[1].Labels, rows[1].LastError)
	}
}

// A bytea label column: its text form is the hex escape (\x6f72...), which
// is valid UTF-8, so it becomes the label value as is.
func TestOutboxBadDataByteaLabel(t *testing.T) {
	_, pool, _ := obSetup(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),
	  kind bytea, status text NOT NULL DEFAULT 'PENDING');
	  INSERT INTO outbox (kind) VALUES ('\xff00fe'::bytea), ('\x6f6b'::bytea)`)
	o := obDefaults(&config.Outbox{Table: "outbox", Labels: []config.Label{{Name: "kind", Column: "kind"}},
		Status: "status", Pending: []string{"PENDING"}, Published: []string{"PUBLISHED"}})
	e := collectors.NewExporter(testutil.Quiet(), NewCollector("messages", o, pool, testutil.Quiet()))
	ms, ok := bdScrapeAll(t, e)
	if ok != 1 {
		t.Fatalf("collector_success = %v with a bytea label, want 1", ok)
	}
	bdGather(t, ms)
	if v := obValue(t, ms, "outbox_events", map[string]string{"kind": `\xff00fe`, "state": "pending"}); v != 1 {
		t.Errorf("pending kind=\\xff00fe = %v, want 1", v)
	}
	if v := obValue(t, ms, "outbox_events", map[string]string{"kind": `\x6f6b`, "state": "pending"}); v != 1 {
		t.Errorf("pending kind=\\x6f6b = %v, want 1", v)
	}
}

// The outbox table dropped while the exporter runs: the collection fails
// (outbox_exporter_collector_success 0) with an ERROR log line naming
// the collector, the outbox and the missing table, without panicking; the
// other collectors keep working. Once the table is created again the next
// scrape succeeds.
func TestOutboxBadDataTableDroppedAndRecreated(t *testing.T) {
	db, pool, _ := obSetup(t, bdSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic) VALUES (now() - interval '1 minute', 'a', 't')`)
	var log bdLog
	e := collectors.NewExporter(log.logger(), NewCollector("messages", obStatusOutbox(), pool, log.logger()), other{})
	if _, ok := bdScrapeAll(t, e); ok != 1 {
		t.Fatalf("collector_success before the drop = %v, want 1", ok)
	}

	db.Exec(t, `DROP TABLE outbox`)
	for i := range 2 {
		ms, _ := bdScrapeAll(t, e)
		got := map[string]float64{}
		for _, m := range ms {
			if testutil.IsMetric(m, "outbox_exporter_collector_success") {
				got[testutil.LabelOf(t, m, "target")] = testutil.MetricValue(t, m)
			}
		}
		if got["messages"] != 0 || got["other"] != 1 {
			t.Errorf("scrape %d after the drop: success %v, want messages 0 and other 1", i, got)
		}
	}
	lines := log.String()
	if !strings.Contains(lines, "level=ERROR") || !strings.Contains(lines, `collector=outbox`) ||
		!strings.Contains(lines, "target=messages") || !strings.Contains(lines, "outbox") {
		t.Errorf("no ERROR line naming the collector and the outbox:\n%s", lines)
	}

	db.Exec(t, bdSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic) VALUES (now() - interval '3 minutes', 'a', 't'), (now(), 'a', 't')`)
	ms, ok := bdScrapeAll(t, e)
	if ok != 1 {
		t.Fatalf("collector_success after the table came back = %v, want 1", ok)
	}
	if v := obValue(t, ms, "outbox_events", map[string]string{"event_type": "a", "state": "pending"}); v != 2 {
		t.Errorf("pending after the table came back = %v, want 2", v)
	}
}

// otherDesc is the metric of other, a collector that always works.
var otherDesc = prometheus.NewDesc("outbox_test_other", "A test metric.", []string{"target"}, nil)

type other struct{}

func (other) Name() string                        { return "fake" }
func (other) Target() string                      { return "other" }
func (other) Describe(ch chan<- *prometheus.Desc) { ch <- otherDesc }
func (other) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	ch <- prometheus.MustNewConstMetric(otherDesc, prometheus.GaugeValue, 1, "other")
	return nil
}

func TestBadDataSchemaAllowsNullCreatedAt(t *testing.T) {
	if bdSchema == obStatusSchema || !strings.Contains(bdSchema, "created_at timestamptz DEFAULT now()") {
		t.Fatalf("bdSchema did not drop NOT NULL from created_at:\n%s", bdSchema)
	}
}
