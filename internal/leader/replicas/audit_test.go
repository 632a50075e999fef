package replicas

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// TestReplicasShareTheAudit: two exporter processes audit one outbox
// against topics on the real Apache Kafka broker. Only the replica that
// leads audit/messages starts the audit (reads the topics) and exports
// its findings; when it is killed, the other starts it, reads the window
// the topics hold and exports the findings.
func TestReplicasShareTheAudit(t *testing.T) {
	a, b := fixture(t)
	broker := kafkatest.Shared(t)
	topic := kafkatest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	// Every published outbox row's event on the topic.
	var recs []*kgo.Record
	for i := 1; i <= 200; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Timestamp: time.Now().Add(-time.Hour + time.Minute),
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(fmt.Sprint(i))}}})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	extra := fmt.Sprintf(`
kafka:
  main:
    brokers: [%s]
audit:
  messages:
    kafka: main
    topics: [%s]
    event_id: header:event_id
    grace: 1s
    window: 2h
    interval: 1s
`, strings.Join(broker.Brokers(), ", "), topic)
	bin := build(t)
	rs := []*replica{start(t, bin, "r1", a, b, extra), start(t, bin, "r2", a, b, extra)}
	const auditTask = "audit/messages"
	leaderOf := func() *replica {
		var got *replica
		waitUntil(t, "one replica leads "+auditTask, func() bool {
			got = nil
			for _, r := range rs {
				if r.leadsTask(auditTask) {
					if got != nil {
						return false
					}
					got = r
				}
			}
			return got != nil
		})
		return got
	}
	l := leaderOf()
	checked := `outbox_audit_checked_events_total{outbox="messages"}`
	waitUntil(t, l.name+" exports the audit", func() bool { _, m, _ := l.get(t, "/metrics"); return strings.Contains(m, checked) })
	other := without(rs, l)[0]
	if n := other.count("audit started: this replica leads it"); n != 0 {
		t.Fatalf("standby %s started the audit %d times", other.name, n)
	}
	if _, m, _ := other.get(t, "/metrics"); strings.Contains(m, checked) {
		t.Fatalf("standby %s exports audit findings", other.name)
	}
	if n := l.count("audit started: this replica leads it"); n != 1 {
		t.Fatalf("leader %s started the audit %d times, want once", l.name, n)
	}

	l.kill()
	rs = []*replica{other}
	if leaderOf() != other {
		t.Fatal("the survivor does not lead")
	}
	waitUntil(t, other.name+" exports the audit after the takeover", func() bool {
		_, m, _ := other.get(t, "/metrics")
		return strings.Contains(m, checked) && strings.Contains(m, `outbox_audit_missing_in_broker_events{outbox="messages"} 0`)
	})
}
