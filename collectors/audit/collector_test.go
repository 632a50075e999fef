package audit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// auditAdapter lets testutil collect one Collector.
type auditAdapter struct{ c collectors.Collector }

func (a auditAdapter) Describe(ch chan<- *prometheus.Desc) { a.c.Describe(ch) }
func (a auditAdapter) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.c.Update(ctx, ch)
}

// TestAuditCollectorBeforeComparison: an auditor that has not compared yet
// exports its counters but no finding gauges, which would claim a clean
// audit that was not made.
func TestAuditCollectorBeforeComparison(t *testing.T) {
	ob := &config.Outbox{Table: "outbox", ID: "event_id", CreatedAt: "created_at"}
	a, err := New("messages", &config.Audit{Topics: []string{"messages"}, EventID: "key", Sample: 1, Grace: time.Minute, Window: time.Hour},
		ob, &config.Kafka{Brokers: []string{"127.0.0.1:1"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := promtestutil.CollectAndCompare(auditAdapter{NewCollector(a)}, strings.NewReader(`
# HELP outbox_audit_checked_events_total Sampled outbox rows compared with the topics, each counted once when it becomes older than the grace.
# TYPE outbox_audit_checked_events_total counter
outbox_audit_checked_events_total{outbox="messages"} 0
`), "outbox_audit_checked_events_total", "outbox_audit_missing_in_broker_events", "outbox_audit_unmarked_in_broker_events"); err != nil {
		t.Error(err)
	}
}

func TestAuditCollector(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (event_id text, created_at timestamptz, status text, published_at timestamptz)`)
	now := time.Now()
	db.Exec(t, `INSERT INTO outbox VALUES ('on-topic', $1, 'PUBLISHED', $2), ('lost', $1, 'PUBLISHED', $2), ('unacked', $1, 'PENDING', NULL)`,
		now.Add(-10*time.Minute), now.Add(-9*time.Minute))
	kc := kafkatest.New(t, 1, kfake.SeedTopics(1, "messages"))
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hdr := func(id string) []kgo.RecordHeader { return []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}} }
	ts := now.Add(-9 * time.Minute)
	if err := prod.ProduceSync(ctx,
		&kgo.Record{Topic: "messages", Timestamp: ts, Headers: hdr("on-topic")},
		&kgo.Record{Topic: "messages", Timestamp: ts, Headers: hdr("unacked")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pool, err := pg.Open(ctx, &config.Database{DSN: config.Secret(db.URL), MaxConnections: 1, StatementTimeout: 5 * time.Second, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ob := &config.Outbox{Table: "outbox", ID: "event_id", CreatedAt: "created_at", Status: "status", Pending: []string{"PENDING"}, Published: []string{"PUBLISHED"}, PublishedAt: "published_at"}
	a, err := New("messages", &config.Audit{Topics: []string{"messages"}, EventID: "header:event_id", Sample: 1, Grace: time.Minute, Window: time.Hour},
		ob, &config.Kafka{Brokers: kc.Brokers()}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.SetCompareInterval(time.Hour)
	a.Start(ctx)
	defer a.Close()
	// A record with no event id, after the start: counted as malformed.
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "messages"}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := NewCollector(a)
	if c.Name() != "audit" || c.Target() != "messages" {
		t.Fatalf("name %q target %q", c.Name(), c.Target())
	}
	for a.Stats().Records < 3 || !a.Ready() {
		if ctx.Err() != nil {
			t.Fatalf("tailer did not read the records: %+v", a.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Compare(ctx); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP outbox_audit_duplicates_total Extra copies of sampled event ids seen on the topics within the audit window, counted from the exporter's start (the window re-read at start is not counted again).
# TYPE outbox_audit_duplicates_total counter
outbox_audit_duplicates_total{outbox="messages"} 0
# HELP outbox_audit_malformed_records_total Records on the audited topics with no readable event id (no header, no key, bad JSON); they are skipped.
# TYPE outbox_audit_malformed_records_total counter
outbox_audit_malformed_records_total{outbox="messages"} 1
# HELP outbox_audit_missing_in_broker_events Sampled outbox rows marked published longer than the grace ago whose event id is not on the audited topics: events silently lost. /api/v1/audit?outbox= lists the ids.
# TYPE outbox_audit_missing_in_broker_events gauge
outbox_audit_missing_in_broker_events{outbox="messages"} 1
# HELP outbox_audit_unmarked_in_broker_events Sampled outbox rows still unpublished whose event id reached the topics more than the grace ago: the relay's acknowledgement was lost and a retry will publish a duplicate.
# TYPE outbox_audit_unmarked_in_broker_events gauge
outbox_audit_unmarked_in_broker_events{outbox="messages"} 1
`
	if err := promtestutil.CollectAndCompare(auditAdapter{c}, strings.NewReader(want),
		"outbox_audit_duplicates_total", "outbox_audit_malformed_records_total", "outbox_audit_missing_in_broker_events", "outbox_audit_unmarked_in_broker_events"); err != nil {
		t.Error(err)
	}
	if err := c.Update(ctx, make(chan prometheus.Metric, 10)); err != nil {
		t.Errorf("Update: %v", err)
	}
}
