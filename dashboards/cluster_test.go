package dashboards

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// TestClusterScoped: with alerting.cluster_label, every dashboard has a
// cluster variable, and every query keeps the clusters apart: each
// selector matches the variable, each max and min over replicas and each
// vector match keeps the label. Sums may add clusters up.
func TestClusterScoped(t *testing.T) {
	cfg, err := config.LoadWithoutSecrets("../alerts/testdata/multi.yml")
	if err != nil {
		t.Fatal(err)
	}
	const cl = "k8s_cluster"
	files, err := All(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$"+cl, "__cluster__", "$job", "__job__", "$instance", "__instance__", "$event_type", "x", "$destination", "x", "$kind", "x", "$group", "x")
	queries := 0
	for _, f := range files {
		var names []string
		for _, v := range f.Dashboard.Templating.List {
			names = append(names, v.Name)
			if v.Name == "job" && !strings.Contains(*v.Query.String, cl+`=~"$`+cl+`"`) {
				t.Errorf("%s: the job variable is not narrowed to the chosen clusters: %s", f.Name, *v.Query.String)
			}
		}
		if !slices.Contains(names, cl) {
			t.Errorf("%s has no %s variable: %v", f.Name, cl, names)
		}
		for _, p := range panelsOf(f.Dashboard) {
			for _, tg := range p.Targets {
				q := tg.(prometheus.Dataquery)
				queries++
				for _, prob := range clusterProblems(vars.Replace(q.Expr), cl) {
					t.Errorf("%s / %s: %s:\n%s", f.Name, derefString(p.Title), prob, q.Expr)
				}
				if q.LegendFormat != nil && *q.LegendFormat != "" && !strings.Contains(*q.LegendFormat, "{{"+cl+"}}") {
					t.Errorf("%s / %s: legend %q does not name the cluster", f.Name, derefString(p.Title), *q.LegendFormat)
				}
			}
		}
	}
	if queries < 20 {
		t.Errorf("only %d queries checked", queries)
	}
	// The example, without a cluster label, is left as it was.
	b, _ := json.Marshal(mustOverview(t, exampleConfig(t)))
	if strings.Contains(string(b), cl) {
		t.Error("the example's overview names a cluster label it does not configure")
	}
}

func mustOverview(t *testing.T, cfg *config.Config) any {
	t.Helper()
	d, err := Overview(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// clusterProblems lists where expr does not keep label cl.
func clusterProblems(expr, cl string) []string {
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return []string{"does not parse: " + err.Error()}
	}
	var probs []string
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if !slices.ContainsFunc(n.LabelMatchers, func(m *labels.Matcher) bool {
				return m.Name == cl && m.Type == labels.MatchRegexp && m.Value == "__cluster__"
			}) {
				probs = append(probs, "selector "+n.String()+" does not match the cluster variable")
			}
		case *parser.AggregateExpr:
			if (n.Op == parser.MAX || n.Op == parser.MIN) && (n.Without || !slices.Contains(n.Grouping, cl)) {
				probs = append(probs, n.Op.String()+" over "+strings.Join(n.Grouping, ", ")+" drops the cluster")
			}
		case *parser.BinaryExpr:
			if m := n.VectorMatching; m != nil && m.On && len(m.MatchingLabels) > 0 && !slices.Contains(m.MatchingLabels, cl) {
				probs = append(probs, "on ("+strings.Join(m.MatchingLabels, ", ")+") drops the cluster")
			}
		}
		return nil
	})
	return probs
}
