package cdc

import (
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// TestMain stops the package's real Kafka broker at the end. Debezium's
// connector creates its topics as it routes, so the broker creates topics
// on first use.
func TestMain(m *testing.M) {
	kafkatest.Main(m, kafkatest.Options{Extra: map[string]string{"auto.create.topics.enable": "true"}})
}
