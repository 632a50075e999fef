package audit

import (
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// TestMain stops the package's real Kafka broker (started by the first
// test that needs it) when the tests end.
func TestMain(m *testing.M) { kafkatest.Main(m) }
