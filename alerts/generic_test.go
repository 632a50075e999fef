package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// TestGoldenGeneric: the rules that serve any config, as the chart and
// the kustomize manifests ship them (no selector, no cluster label).
func TestGoldenGeneric(t *testing.T) {
	f, err := Generic(config.Alerting{RunbookURL: DefaultRunbookURL})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "generic.rules.yml", b)
}

// GenericNames are the names the generic promtool tests are rendered
// with; deploy/helm/charttest renders the same template with others.
type GenericNames struct {
	RuleFile                                     string
	Job, Outbox, Outbox2, Label, Value           string
	Cluster, Group, Group2, Topic                string
	Reconcile, Reconcile2, Audit, CDC, Collector string
}

// renderGenericTest renders testdata/generic.rules.test.tmpl with names.
func renderGenericTest(t *testing.T, names GenericNames) string {
	t.Helper()
	raw, err := os.ReadFile("testdata/generic.rules.test.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("generic").Option("missingkey=error").Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	if err := tmpl.Execute(&sb, names); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// runPromtoolTests runs `promtool test rules` on test with every promtool
// (Debian's 2.x and 3.x).
func runPromtoolTests(t *testing.T, dir, test string) {
	t.Helper()
	p := filepath.Join(dir, "generic.rules.test.yml")
	if err := os.WriteFile(p, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, promtool := range testutil.Promtools(t) {
		out, err := exec.Command(promtool, "test", "rules", p).CombinedOutput()
		if err != nil {
			t.Errorf("%s test rules: %v\n%s", promtool, err, out)
		}
	}
}

// TestGenericRulesFire runs the generic promtool tests on the generic
// rules: every alert fires just after its for: for the names given, and
// nothing fires on a healthy pipeline.
func TestGenericRulesFire(t *testing.T) {
	dir := t.TempDir()
	f, err := Generic(config.Alerting{RunbookURL: DefaultRunbookURL})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "generic.rules.yml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtoolTests(t, dir, renderGenericTest(t, GenericNames{
		RuleFile: "generic.rules.yml", Job: "outbox_exporter", Outbox: "messages", Outbox2: "payments",
		Label: "event_type", Value: "order.paid", Cluster: "main", Group: "search-index", Group2: "notify",
		Topic: "messages", Reconcile: "search_index", Reconcile2: "nightly", Audit: "messages", CDC: "orders", Collector: "outbox",
	}))
}

// alertChecks are the ALERTS checks of a generic test file: per test
// group, per eval time, the expressions checked and the labels expected.
type alertChecks struct {
	Tests []struct {
		Name  string `yaml:"name"`
		Exprs []struct {
			Expr     string `yaml:"expr"`
			EvalTime string `yaml:"eval_time"`
			Samples  []struct {
				Labels string `yaml:"labels"`
			} `yaml:"exp_samples"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

var matcher = regexp.MustCompile(`(\w+)="([^"]*)"`)

// TestGenericAlertsTestedAroundTheirFor checks that the generic test
// template covers every generic alerting rule: a check where it is silent
// and, one evaluation (1m) later, a check where it fires; and that the
// healthy group checks that nothing fires or is pending.
func TestGenericAlertsTestedAroundTheirFor(t *testing.T) {
	f, err := Generic(config.Alerting{})
	if err != nil {
		t.Fatal(err)
	}
	var ac alertChecks
	if err := yaml.Unmarshal([]byte(renderGenericTest(t, GenericNames{})), &ac); err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	healthy := false
	for _, tg := range ac.Tests {
		silent := map[string]time.Duration{}
		for _, e := range tg.Exprs {
			at, err := model.ParseDuration(e.EvalTime)
			if err != nil {
				t.Fatalf("%s: %v", tg.Name, err)
			}
			if strings.HasPrefix(tg.Name, "healthy") && e.Expr == "ALERTS" && len(e.Samples) == 0 {
				healthy = true
			}
			if len(e.Samples) == 0 {
				silent[e.Expr] = time.Duration(at)
				continue
			}
			before, ok := silent[e.Expr]
			if !ok || before != time.Duration(at)-time.Minute {
				continue
			}
			for _, s := range e.Samples {
				labels := map[string]string{}
				for _, m := range matcher.FindAllStringSubmatch(s.Labels, -1) {
					labels[m[1]] = m[2]
				}
				for _, g := range f.Groups {
					for _, r := range g.Rules {
						if r.Alert != "" && labels["alertname"] == r.Alert && matches(r, labels) {
							covered[ruleKey(r)] = true
						}
					}
				}
			}
		}
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !covered[ruleKey(r)] {
				t.Errorf("%s has no generic case silent 1m before and firing at its for: %s", ruleKey(r), r.For)
			}
		}
	}
	if !healthy {
		t.Error("no healthy group checks that nothing fires")
	}
}
