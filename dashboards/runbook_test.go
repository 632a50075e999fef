package dashboards

import (
	"os"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// TestPanelsLinkTheirRunbooks: every panel PanelAlerts names is in a
// generated dashboard and links to the runbook section of each of its
// alerts; every alert named is a rule the exporter ships and has a
// section in deploy/runbook.md.
func TestPanelsLinkTheirRunbooks(t *testing.T) {
	cfg := exampleConfig(t)
	ds, err := All(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := alerts.Generic(config.Alerting{})
	if err != nil {
		t.Fatal(err)
	}
	shipped := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			shipped[r.Alert] = true
		}
	}
	md, err := os.ReadFile("../deploy/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(md), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[alerts.Anchor(h)] = true
		}
	}
	seen := map[string]bool{}
	check := func(p dashboard.Panel) {
		if p.Title == nil || PanelAlerts[*p.Title] == nil {
			return
		}
		seen[*p.Title] = true
		links := map[string]bool{}
		for _, l := range p.Links {
			if l.Url != nil {
				links[*l.Url] = true
			}
		}
		for _, a := range PanelAlerts[*p.Title] {
			url := cfg.Alerting.RunbookURL + "#" + alerts.Anchor(a)
			if !links[url] {
				t.Errorf("panel %q does not link %s", *p.Title, url)
			}
		}
	}
	for _, d := range ds {
		for _, p := range d.Dashboard.Panels {
			if p.Panel != nil {
				check(*p.Panel)
			}
			if p.RowPanel != nil {
				for _, q := range p.RowPanel.Panels {
					check(q)
				}
			}
		}
	}
	for title, as := range PanelAlerts {
		if !seen[title] {
			t.Errorf("no generated panel is titled %q", title)
		}
		for _, a := range as {
			if !shipped[a] {
				t.Errorf("panel %q names %s, which no rule fires", title, a)
			}
			if !anchors[alerts.Anchor(a)] {
				t.Errorf("deploy/runbook.md has no section for %s", a)
			}
		}
	}
}

// TestNoOutboxWrittenIn: the overview names no outbox and no objective
// of the config: its outbox variable and outbox_slo_objective carry them,
// so one dashboard serves every config.
func TestNoOutboxWrittenIn(t *testing.T) {
	d, err := Overview(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`outbox=\"messages\"`, `(1 - 0.999)`} {
		if strings.Contains(string(b), bad) {
			t.Errorf("the overview contains %s", bad)
		}
	}
	if !strings.Contains(string(b), `"name": "outbox"`) {
		t.Error("the overview has no outbox variable")
	}
}

// TestUIDPrefix: two configs with different prefixes give dashboards with
// no uid in common, so both can be provisioned in one Grafana; a bad
// prefix is refused naming its key and line, not its value.
func TestUIDPrefix(t *testing.T) {
	uids := func(prefix string) map[string]bool {
		cfg := exampleConfig(t)
		cfg.Alerting.DashboardUIDPrefix = prefix
		ds, err := All(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, d := range ds {
			if uid := derefString(d.Dashboard.Uid); !strings.HasPrefix(uid, prefix) || len(uid) > 40 {
				t.Errorf("uid %q does not start with %q or is longer than Grafana's 40", uid, prefix)
				continue
			}
			out[*d.Dashboard.Uid] = true
		}
		return out
	}
	eu, us := uids("eu-payments-"), uids("us_")
	for uid := range eu {
		if us[uid] {
			t.Errorf("both configs make uid %s", uid)
		}
	}
	if len(eu) < 5 || len(us) != len(eu) {
		t.Errorf("%d and %d dashboards", len(eu), len(us))
	}
	const bad = "databases:\n  db: {dsn: \"postgres://x@h/db\"}\nalerting:\n  dashboard_uid_prefix: \"sEcReT/prefix that is far too long\"\n"
	_, err := config.Parse([]byte(bad), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "alerting.dashboard_uid_prefix") || !strings.Contains(err.Error(), "line 4") || strings.Contains(err.Error(), "sEcReT") {
		t.Errorf("bad prefix: %v", err)
	}
}
