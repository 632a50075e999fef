package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// renderedDashboards renders the chart with values and returns its
// dashboards, decoded, by file name.
func renderedDashboards(t *testing.T, values map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range byKind(render(t, values), "ConfigMap") {
		cm := o.value.(*corev1.ConfigMap)
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		for k, v := range cm.Data {
			var d map[string]any
			if err := json.Unmarshal([]byte(v), &d); err != nil {
				t.Fatalf("ConfigMap %s key %s: %v", cm.Name, k, err)
			}
			out[k] = d
		}
	}
	return out
}

// TestChartDashboardUIDPrefix: with dashboards.uidPrefix each bundled
// dashboard, as Helm renders it, is the chart's file with that prefix
// before its uid and nothing else changed (the panels' datasource uids
// stay); without it, the file as it is.
func TestChartDashboardUIDPrefix(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "files", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in the chart: %v", err)
	}
	for _, prefix := range []string{"", "eu-west_1-", "b"} {
		got := renderedDashboards(t, map[string]any{"dashboards": map[string]any{"uidPrefix": prefix}})
		if len(got) != len(files) {
			t.Errorf("prefix %q: %d dashboards rendered, the chart has %d", prefix, len(got), len(files))
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var want map[string]any
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			uid, _ := want["uid"].(string)
			if uid == "" {
				t.Fatalf("%s has no uid", f)
			}
			want["uid"] = prefix + uid
			if d := got[filepath.Base(f)]; !reflect.DeepEqual(d, want) {
				t.Errorf("prefix %q: %s renders uid %v, want %s, or differs elsewhere", prefix, filepath.Base(f), d["uid"], want["uid"])
			}
		}
	}
}

// TestChartDashboardUIDPrefixRefused: a prefix Grafana cannot take (too
// long for its 40-character uids, or not a letter, digit, - or _) fails
// the render, naming the value's key and not echoing the value.
func TestChartDashboardUIDPrefixRefused(t *testing.T) {
	for _, bad := range []string{strings.Repeat("x", 25), "eu west", `a"b`, "ü"} {
		_, err := renderFiles(t, map[string]any{"dashboards": map[string]any{"uidPrefix": bad}})
		if err == nil {
			t.Errorf("prefix %q rendered", bad)
			continue
		}
		if !strings.Contains(err.Error(), "dashboards.uidPrefix") || strings.Contains(err.Error(), bad) {
			t.Errorf("prefix %q: error %q should name dashboards.uidPrefix and not echo the value", bad, err)
		}
	}
}
