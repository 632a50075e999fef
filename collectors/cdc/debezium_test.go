package cdc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// topicReader reads the routed topics from the start and keeps, per
// topic, the "id" header of every record in order.
type topicReader struct {
	mu  sync.Mutex
	ids map[string][]string
}

func readTopics(t *testing.T, b *kafkatest.Broker, topics ...string) *topicReader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableClientMetrics(),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := &topicReader{ids: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(rec *kgo.Record) {
				id := ""
				for _, h := range rec.Headers {
					if h.Key == "id" {
						id = string(h.Value)
					}
				}
				r.mu.Lock()
				r.ids[rec.Topic] = append(r.ids[rec.Topic], id)
				r.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return r
}

func (r *topicReader) get(topic string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids[topic]...)
}

// outboxSchema is Debezium's outbox table as its EventRouter expects it,
// with created_at for the exporter; outbox keeps its rows,
// outbox_transient is a delete-after-insert outbox (Debezium's
// recommendation): each event is inserted and deleted in one
// transaction, so the table is always empty.
const outboxSchema = `
CREATE TABLE outbox (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregatetype text NOT NULL,
  aggregateid text NOT NULL,
  type text NOT NULL,
  payload text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON outbox (created_at);
CREATE TABLE outbox_transient (LIKE outbox INCLUDING ALL);
`

func insertEvents(t *testing.T, s *server, table, aggregate string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		var id string
		var err error
		if table == "outbox_transient" {
			err = s.admin.QueryRow(context.Background(), `WITH ins AS (
				INSERT INTO outbox_transient (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'created', '{"n":1}') RETURNING id)
				SELECT id::text FROM ins`, aggregate, fmt.Sprint(i)).Scan(&id)
			if err == nil {
				_, err = s.admin.Exec(context.Background(), `DELETE FROM outbox_transient WHERE id = $1`, id)
			}
		} else {
			err = s.admin.QueryRow(context.Background(), `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
				VALUES ($1, $2, 'created', '{"n":1}') RETURNING id::text`, aggregate, fmt.Sprint(i)).Scan(&id)
		}
		if err != nil {
			t.Fatalf("insert into %s: %v", table, err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestDebeziumOutbox(t *testing.T) {
	b := kafkatest.Shared(t)
	s := startServer(t, cdctest.Options{WALSegmentMB: 1})
	for _, q := range []string{outboxSchema} {
		s.exec(t, q)
	}
	const slot = "debezium_outbox"
	c := newCollector(s, map[string]*config.CDC{"orders": {Database: "main", Slot: slot, Deadline: 2 * time.Second}})
	cn := newConnect(t, b, s.cluster.Port, "postgres", slot, []string{"public.outbox", "public.outbox_transient"})
	cn.Start()
	waitFor(t, "Debezium creates its slot and streams from it", 90*time.Second, func() (bool, string) {
		m, err := collect(t, c)
		if err != nil {
			return false, err.Error() + "\n" + cn.Status(context.Background()) + "\n" + cn.Log()
		}
		return m.get(t, "outbox_cdc_slot_active", "orders") == 1, cn.Status(context.Background()) + "\n" + cn.Log()
	})
	reader := readTopics(t, b, "outbox.event.orders", "outbox.event.payments")
	orders := insertEvents(t, s, "outbox", "orders", 20)
	payments := insertEvents(t, s, "outbox_transient", "payments", 10)
	waitFor(t, "events routed", 2*time.Minute, func() (bool, string) {
		o, p := reader.get("outbox.event.orders"), reader.get("outbox.event.payments")
		return len(o) >= len(orders) && len(p) >= len(payments), fmt.Sprintf("%d/%d orders, %d/%d payments\n%s", len(o), len(orders), len(p), len(payments), cn.Log())
	})
	if got := reader.get("outbox.event.orders"); fmt.Sprint(got) != fmt.Sprint(orders) {
		t.Errorf("orders topic ids %v\nwant %v", got, orders)
	}
	if got := reader.get("outbox.event.payments"); fmt.Sprint(got) != fmt.Sprint(payments) {
		t.Errorf("payments topic ids %v\nwant %v", got, payments)
	}
}
