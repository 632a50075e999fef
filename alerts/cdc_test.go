package alerts

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// cdcConfig is the example config with two outboxes published by change
// data capture.
func cdcConfig(t *testing.T) *config.Config {
	cfg := exampleConfig(t)
	cfg.CDC = map[string]*config.CDC{
		"orders":   {Database: "app", Slot: "debezium_orders", Deadline: 2 * time.Minute},
		"payments": {Database: "app", Slot: "debezium_payments", Deadline: 30 * time.Second},
	}
	return cfg
}

// cdcGroup is the generated cdc rule group, alone in a rule file.
func cdcGroup(t *testing.T, cfg *config.Config) File {
	t.Helper()
	f, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Groups {
		if g.Name == "outbox-cdc.alerts" {
			return File{Groups: []Group{g}}
		}
	}
	t.Fatalf("no outbox-cdc.alerts group in %v", f.Groups)
	return File{}
}

// The cdc alerts are golden (testdata/cdc.rules.yml), pass promtool's
// checks, and fire exactly at their for: in the cases of
// testdata/cdc.rules.test.yml, which also has a healthy pipeline where
// none fires. Without a cdc section there is no cdc group.
func TestCDCAlerts(t *testing.T) {
	f := cdcGroup(t, cdcConfig(t))
	out, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "cdc.rules.yml", out)
	for _, promtool := range testutil.Promtools(t) {
		if out, err := exec.Command(promtool, "check", "rules", "testdata/cdc.rules.yml").CombinedOutput(); err != nil {
			t.Fatalf("%s check rules: %v\n%s", promtool, err, out)
		}
		if out, err := exec.Command(promtool, "test", "rules", "testdata/cdc.rules.test.yml").CombinedOutput(); err != nil {
			t.Fatalf("%s test rules: %v\n%s", promtool, err, out)
		}
	}
	plain, err := Build(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range plain.Groups {
		if g.Name == "outbox-cdc.alerts" {
			t.Error("a config without cdc has cdc alerts")
		}
	}
}

// Every cdc alert has its runbook section with its severity, meaning,
// check and repair, and is tested around its for: like the others.
func TestCDCAlertsRunbookAndCoverage(t *testing.T) {
	cfg := cdcConfig(t)
	f := cdcGroup(t, cfg)
	runbook, err := os.ReadFile("../deploy/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := runbookSections(string(runbook))
	tests, err := os.ReadFile("testdata/cdc.rules.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Groups[0].Rules {
		if !camelOutbox.MatchString(r.Alert) || r.For == "" {
			t.Errorf("%s: name or for: breaks the conventions", r.Alert)
		}
		body, ok := sections[Anchor(r.Alert)]
		if !ok {
			t.Errorf("%s: deploy/runbook.md has no section", r.Alert)
			continue
		}
		if !strings.Contains(body, "**Severity:** "+r.Labels["severity"]) {
			t.Errorf("%s: runbook section does not give severity %s", r.Alert, r.Labels["severity"])
		}
		for _, want := range []string{"**Meaning.**", "**Check.**", "**Repair.**"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: runbook section lacks %q", r.Alert, want)
			}
		}
		if strings.Count(string(tests), "alertname: "+r.Alert+"\n") < 3 {
			t.Errorf("%s: fewer than three promtool cases (before its for:, at it, healthy)", r.Alert)
		}
	}
}
