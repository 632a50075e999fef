package audit

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// TestStopThenStartAgain: Stop ends the tailer and closes its client (a
// replica that lost the audit's lease reads nothing more from the
// broker), and a later Start reads the window again, records produced
// while stopped included (the replica leads it again).
func TestStopThenStartAgain(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (event_id text, created_at timestamptz, status text, published_at timestamptz)`)
	kc := kafkatest.New(t, 1, kfake.SeedTopics(1, "messages"))
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produce := func(id string) {
		t.Helper()
		rec := &kgo.Record{Topic: "messages", Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}}}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce("a")
	produce("b")
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
	defer a.Close()
	waitRecords := func(n uint64) {
		t.Helper()
		for a.Stats().Records < n || !a.Ready() {
			if ctx.Err() != nil {
				t.Fatalf("the tailer did not read %d records: %+v", n, a.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a.Start(ctx)
	waitRecords(2)
	a.Stop()
	a.mu.Lock()
	cl := a.client
	a.mu.Unlock()
	if cl != nil {
		t.Fatal("Stop left the Kafka client open")
	}
	produce("c") // while no replica here reads
	before := a.Stats().Records
	a.Start(ctx)
	// The whole window again: a, b and c.
	waitRecords(before + 3)
}
