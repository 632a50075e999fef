package cdc

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// promSeries turns collections (one per evaluation minute) into promtool
// input series, each padded to pad points with its last value.
func promSeries(snaps []metrics, pad int) []string {
	names := map[string]bool{}
	for _, s := range snaps {
		for k := range s {
			names[k] = true
		}
	}
	var keys []string
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		name, labels, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		ls := []string{`job="outbox_exporter"`, `instance="exporter:9899"`}
		for _, l := range strings.Split(labels, ",") {
			if n, v, ok := strings.Cut(l, "="); ok {
				ls = append(ls, fmt.Sprintf("%s=%q", n, v))
			}
		}
		var vals []string
		last := "_"
		for _, s := range snaps {
			last = "_"
			if v, ok := s[k]; ok {
				last = strconv.FormatFloat(v, 'f', -1, 64)
			}
			vals = append(vals, last)
		}
		for len(vals) < pad {
			vals = append(vals, last)
		}
		out = append(out, fmt.Sprintf("      - series: '%s{%s}'\n        values: '%s'", name, strings.Join(ls, ", "), strings.Join(vals, " ")))
	}
	return out
}

// alertCase is one promtool expectation: at minute at, the alert fires
// for cdc (or, with cdc empty, does not fire).
type alertCase struct {
	alert string
	at    int
	cdc   string
	sev   string
}

// runPromtool evaluates the generated cdc rules, without annotations
// (their text is checked in ./alerts), on series made from the
// exporter's real collections, and fails the test if an expectation
// does not hold.
func runPromtool(t *testing.T, cfg *config.Config, snaps []metrics, pad int, cases []alertCase) {
	t.Helper()
	f, err := alerts.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var kept alerts.File
	for _, g := range f.Groups {
		if g.Name == "outbox-cdc.alerts" {
			for i := range g.Rules {
				g.Rules[i].Annotations = nil
			}
			kept.Groups = append(kept.Groups, g)
		}
	}
	rules, err := alerts.Marshal(kept)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cdc.rules.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString("rule_files: [cdc.rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n")
	sb.WriteString(strings.Join(promSeries(snaps, pad), "\n") + "\n    alert_rule_test:\n")
	for _, c := range cases {
		fmt.Fprintf(&sb, "      - eval_time: %dm\n        alertname: %s\n", c.at, c.alert)
		if c.cdc == "" {
			sb.WriteString("        exp_alerts: []\n")
			continue
		}
		fmt.Fprintf(&sb, "        exp_alerts:\n          - exp_labels: {severity: %s, job: outbox_exporter, cdc: %s}\n", c.sev, c.cdc)
	}
	testutil.PromtoolTestRules(t, dir, "cdc.test.yml", sb.String())
}
