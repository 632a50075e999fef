package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// New reports bad Kafka settings at once, without starting a consumer:
// only Start makes the tailer's client.
func TestNewReportsBadKafkaSettings(t *testing.T) {
	ob := &config.Outbox{Table: "outbox", ID: "event_id", CreatedAt: "created_at"}
	a := &config.Audit{Topics: []string{"messages"}, EventID: "key", Sample: 1, Grace: time.Minute, Window: time.Hour}
	_, err := New("messages", a, ob, &config.Kafka{Brokers: []string{"127.0.0.1:notaport"}}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "kafka client") {
		t.Fatalf("New with an unparsable broker address: err = %v, want a kafka client error", err)
	}
	au, err := New("messages", a, ob, &config.Kafka{Brokers: []string{"127.0.0.1:9"}}, nil, nil)
	if err != nil {
		t.Fatalf("New with a valid (unreachable) broker: %v", err)
	}
	if au.client != nil {
		t.Error("New made a client; only Start should")
	}
}
