package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// check runs the audit's checks: on topics whose ids are the table's in
// upper case it fails naming that, and it warns where silent loss cannot
// be seen.
func TestCheckAuditIDs(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE outbox (event_id text PRIMARY KEY, created_at timestamptz NOT NULL, status text NOT NULL, published_at timestamptz)`)
	kc := kafkatest.New(t, 1, kfake.SeedTopics(1, "messages"))
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var recs []*kgo.Record
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("order-%d-abc", i)
		db.Exec(t, `INSERT INTO outbox VALUES ($1, now(), 'PUBLISHED', now())`, id)
		recs = append(recs, &kgo.Record{Topic: "messages", Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(strings.ToUpper(id))}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	write := func(outbox string) string {
		path := filepath.Join(t.TempDir(), "config.yml")
		os.WriteFile(path, []byte(fmt.Sprintf(`
databases:
  main:
    dsn: %q
outboxes:
  messages:
    database: main
    table: public.outbox
    id: event_id
    created_at: created_at
%s    deadline: 5m
kafka:
  main:
    brokers: [%s]
audit:
  messages:
    kafka: main
    topics: [messages]
    event_id: header:event_id
`, db.URL, outbox, kc.Brokers()[0])), 0o600)
		return path
	}
	check := func(path string) (int, string) {
		var out, errOut syncBuffer
		code := run(ctx, []string{"check", "--config.file=" + path}, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := check(write("    status: status\n    pending: [PENDING]\n    published: [PUBLISHED]\n    published_at: published_at\n"))
	if code != 1 || !strings.Contains(out, "audit messages: NOT OK") || !strings.Contains(out, "the topic's ids are upper case") {
		t.Fatalf("check with upper-case ids on the topic: exit %d\n%s", code, out)
	}
	_, out = check(write(""))
	if !strings.Contains(out, "WARN silent loss: the outbox deletes rows when they are published") {
		t.Fatalf("check of a delete-on-publish outbox: no warning\n%s", out)
	}
}
