package main

import (
	"strings"
	"testing"
	"time"
)

// TestDemoGuide: what the demo prints once the exporter serves names every
// page and API to open at the address it listens on, the reconcile
// schedule, and the config to generate dashboards and rules from.
func TestDemoGuide(t *testing.T) {
	g := demoGuide("http://127.0.0.1:9187", "/metrics", "/tmp/outbox-demo-1/outbox_exporter.yml", "@every 30s", time.Minute)
	for _, want := range []string{
		"http://127.0.0.1:9187/ ", "http://127.0.0.1:9187/metrics", "http://127.0.0.1:9187/api/v1/stuck?outbox=messages",
		"http://127.0.0.1:9187/api/v1/reconcile?job=search_index", "http://127.0.0.1:9187/api/v1/audit?outbox=messages",
		"@every 30s", "--config.file=/tmp/outbox-demo-1/outbox_exporter.yml", "every 1m0s",
	} {
		if !strings.Contains(g, want) {
			t.Errorf("guide lacks %q:\n%s", want, g)
		}
	}
	if off := demoGuide("http://127.0.0.1:9187", "/metrics", "f.yml", "@every 30s", 0); !strings.Contains(off, "Faults are off") {
		t.Errorf("guide with faults off does not say so:\n%s", off)
	}
}
