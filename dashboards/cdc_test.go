package dashboards

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// With a cdc section the CDC dashboard is generated (golden
// testdata/outbox-cdc.json) and shows every slot signal; without one it
// is not (TestGoldenExample's list).
func TestCDCDashboard(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.CDC = map[string]*config.CDC{"orders": {Database: "app", Slot: "debezium_orders", Deadline: 2 * time.Minute}}
	files, err := All(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, f := range files {
		if f.Name == "outbox-cdc.json" {
			if derefString(f.Dashboard.Uid) != CDCUID {
				t.Errorf("uid %q", derefString(f.Dashboard.Uid))
			}
			if got, err = Marshal(f.Dashboard); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got == nil {
		t.Fatal("no outbox-cdc.json with a cdc section")
	}
	for _, m := range []string{"outbox_cdc_slot_lag_seconds", "outbox_cdc_deadline_seconds", "outbox_cdc_slot_lag_bytes",
		"outbox_cdc_slot_active", "outbox_cdc_slot_wal_status", "outbox_cdc_slot_safe_wal_size_bytes"} {
		if !strings.Contains(string(got), m) {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
	golden(t, "outbox-cdc.json", got)
}
