package dashboards

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// panelExpr returns the expression of query ref of the panel titled title
// in the example's overview, with the variables as Grafana sets them when
// "All" is chosen and $__rate_interval at 5m.
func panelExpr(t *testing.T, title, ref string) string {
	t.Helper()
	d, err := Overview(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range panelsOf(d) {
		if derefString(p.Title) != title {
			continue
		}
		for _, q := range p.Targets {
			b, _ := json.Marshal(q)
			var m struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			}
			_ = json.Unmarshal(b, &m)
			if m.RefID == ref {
				return strings.NewReplacer(`"$job"`, `".+"`, `"$instance"`, `".+"`, `"$outbox"`, `".*"`, `"$event_type"`, `".*"`, `"$destination"`, `".*"`, "$__rate_interval", "5m").Replace(m.Expr)
			}
		}
	}
	t.Fatalf("no panel %q query %s", title, ref)
	return ""
}

// TestOverviewAddsUpLabelValues evaluates the overview's totals with
// promtool against values worked out by hand from the series. Two
// replicas report the same counts (max over them, not a sum), and two
// event types differ: order.paid 96 a minute all on time, user.created
// 32 a minute all late, so 96 of 128 (0.75) are on time, where a max of
// each count would give 1 - 32/96. Events by state adds up the event
// types: 7 pending of order.paid and 5 of user.created are 12.
func TestOverviewAddsUpLabelValues(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed; install it with: apt-get install -y --no-install-recommends prometheus")
	}
	var series []map[string]string
	for _, inst := range []string{"exporter-1:9899", "exporter-2:9899"} {
		l := `job="outbox_exporter", instance="` + inst + `", outbox="messages", `
		series = append(series,
			map[string]string{"series": `outbox_published_events_total{` + l + `event_type="order.paid", destination="orders"}`, "values": "0+96x20"},
			map[string]string{"series": `outbox_published_late_events_total{` + l + `event_type="order.paid", destination="orders"}`, "values": "0x20"},
			map[string]string{"series": `outbox_published_events_total{` + l + `event_type="user.created", destination="users"}`, "values": "0+32x20"},
			map[string]string{"series": `outbox_published_late_events_total{` + l + `event_type="user.created", destination="users"}`, "values": "0+32x20"},
			map[string]string{"series": `outbox_events{` + l + `state="pending", event_type="order.paid", destination="orders"}`, "values": "7x20"},
			map[string]string{"series": `outbox_events{` + l + `state="pending", event_type="user.created", destination="users"}`, "values": "5x20"},
		)
	}
	doc := map[string]any{
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":     "1m",
			"input_series": series,
			"promql_expr_test": []any{
				map[string]any{"expr": panelExpr(t, "Share published within deadline", "A"), "eval_time": "10m",
					"exp_samples": []any{map[string]any{"labels": `{outbox="messages"}`, "value": 0.75}}},
				map[string]any{"expr": panelExpr(t, "Events by state", "A"), "eval_time": "10m",
					"exp_samples": []any{map[string]any{"labels": `{outbox="messages", state="pending"}`, "value": 12}}},
			},
		}},
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "overview.test.yml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", p).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\n%s", err, out, b)
	}
}

func TestLatencyLegends(t *testing.T) {
	for q, want := range map[string]string{"0.5": "{{outbox}} p50", "0.9": "{{outbox}} p90", "0.99": "{{outbox}} p99"} {
		if got := latencyQuantile(q).legend; got != want {
			t.Errorf("legend of %s = %q, want %q", q, got, want)
		}
	}
}
