package alerts

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// leaderGroup is the generated leader rule group of the example config
// with leader_election, alone in a rule file.
func leaderGroup(t *testing.T) File {
	t.Helper()
	cfg := exampleConfig(t)
	cfg.LeaderElection = &config.LeaderElection{Database: "main"}
	f, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Groups {
		if g.Name == "outbox-leader.alerts" {
			return File{Groups: []Group{g}}
		}
	}
	t.Fatalf("no outbox-leader.alerts group in %v", f.Groups)
	return File{}
}

// The leader alerts are golden (testdata/leader.rules.yml), pass
// promtool's checks, fire at their for: and not before, nor across a
// handover, in testdata/leader.rules.test.yml; each has its runbook
// section. Without leader_election there is no leader group.
func TestLeaderAlerts(t *testing.T) {
	f := leaderGroup(t)
	if n := len(f.Groups[0].Rules); n != 2 {
		t.Fatalf("%d leader rules, want one per reconcile job and audit (2)", n)
	}
	out, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "leader.rules.yml", out)
	for _, promtool := range testutil.Promtools(t) {
		if out, err := exec.Command(promtool, "check", "rules", "testdata/leader.rules.yml").CombinedOutput(); err != nil {
			t.Fatalf("%s check rules: %v\n%s", promtool, err, out)
		}
		if out, err := exec.Command(promtool, "test", "rules", "testdata/leader.rules.test.yml").CombinedOutput(); err != nil {
			t.Fatalf("%s test rules: %v\n%s", promtool, err, out)
		}
	}
	runbook, err := os.ReadFile("../deploy/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	body, ok := runbookSections(string(runbook))[Anchor("OutboxTaskLeaderless")]
	if !ok || !strings.Contains(body, "**Severity:** warning") || !strings.Contains(body, "**Repair.**") {
		t.Errorf("deploy/runbook.md: no complete OutboxTaskLeaderless section")
	}
	cfg := exampleConfig(t)
	cfg.LeaderElection = nil
	plain, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range plain.Groups {
		if g.Name == "outbox-leader.alerts" {
			t.Error("a config without leader_election has leader alerts")
		}
	}
}
