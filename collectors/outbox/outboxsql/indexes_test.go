package outboxsql

import (
	"strings"
	"testing"
)

// TestIndexName: an index is named outbox_exporter_<outbox>_<suffix>; a
// long name is cut to the 63 bytes PostgreSQL keeps, the same each time,
// with its suffix kept.
func TestIndexName(t *testing.T) {
	if got := IndexName("messages", "unpublished"); got != "outbox_exporter_messages_unpublished" {
		t.Errorf("IndexName = %q", got)
	}
	long := IndexName(strings.Repeat("x", 60), "unpublished")
	if len(long) > 63 || !strings.HasSuffix(long, "_unpublished") || long != IndexName(strings.Repeat("x", 60), "unpublished") {
		t.Errorf("long IndexName = %q (%d)", long, len(long))
	}
}
