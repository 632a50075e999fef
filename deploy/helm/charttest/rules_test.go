package charttest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository's root, from this directory.
const repoRoot = "../../.."

// unseenNames are the names of testdata/unseen.yml and the job label the
// tests give the exporter, none of which the repository's other files
// use, for alerts/testdata/generic.rules.test.tmpl.
var unseenNames = map[string]string{
	"Job": "ledger_exporter", "Outbox": "ledger_events", "Outbox2": "fx_rates", "Label": "tenant", "Value": "acme-gmbh",
	"Cluster": "billing_kafka", "Group": "invoicer", "Group2": "archiver", "Topic": "ledger.v2",
	"Reconcile": "ledger_vs_warehouse", "Reconcile2": "quarterly_sweep", "Audit": "ledger_events", "CDC": "wal_capture",
	"Collector": "outbox",
}

// promtools are Debian's promtool (2.x) and the 3.x one scripts/deps.sh
// builds into .cache/bin.
func promtools(t *testing.T) []string {
	t.Helper()
	p2, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (apt-get install -y --no-install-recommends prometheus): %v", err)
	}
	p3, err := filepath.Abs(filepath.Join(repoRoot, ".cache", "bin", "promtool"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p3); err != nil {
		t.Fatalf("promtool 3.x is not built; run scripts/deps.sh: %v", err)
	}
	return []string{p2, p3}
}

// proveRules writes spec's groups as a rule file and runs the generic
// promtool tests, rendered with the unseen names, on it with both
// promtools: every alert fires just after its for: for those names, and
// nothing fires on a healthy pipeline.
func proveRules(t *testing.T, spec monitoringv1.PrometheusRuleSpec) {
	t.Helper()
	dir := t.TempDir()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.JSONToYAML(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rendered.rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "alerts", "testdata", "generic.rules.test.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("generic").Option("missingkey=error").Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{"RuleFile": "rendered.rules.yml"}
	for k, v := range unseenNames {
		names[k] = v
	}
	var test bytes.Buffer
	if err := tmpl.Execute(&test, names); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "rendered.rules.test.yml")
	if err := os.WriteFile(p, test.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, promtool := range promtools(t) {
		if out, err := exec.Command(promtool, "check", "rules", "--lint=all", "--lint-fatal", filepath.Join(dir, "rendered.rules.yml")).CombinedOutput(); err != nil {
			t.Errorf("%s check rules: %v\n%s", promtool, err, out)
		}
		if out, err := exec.Command(promtool, "test", "rules", p).CombinedOutput(); err != nil {
			t.Errorf("%s test rules with names the repository never uses: %v\n%s", promtool, err, out)
		}
	}
}

// TestChartRulesFitAnyConfig installs the chart as a user would, with a
// config and a job label the repository has never seen, and proves its
// PrometheusRule pages for them.
func TestChartRulesFitAnyConfig(t *testing.T) {
	cfg, err := os.ReadFile("testdata/unseen.yml")
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, map[string]any{
		"config":         string(cfg),
		"jobLabel":       unseenNames["Job"],
		"dsnSecrets":     []any{map[string]any{"env": "LEDGER_DSN", "secretName": "ledger-dsn", "key": "dsn"}},
		"prometheusRule": map[string]any{"enabled": true},
	})
	prs := byKind(objs, "PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("%d PrometheusRules", len(prs))
	}
	pr := prs[0].value.(*monitoringv1.PrometheusRule)
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if strings.Contains(r.Expr.String(), `"messages"`) {
				t.Errorf("rule %s%s names the example's outbox: %s", r.Alert, r.Record, r.Expr.String())
			}
		}
	}
	proveRules(t, pr.Spec)
}

// TestKustomizeRulesFitAnyConfig builds the kustomize manifests with
// kubectl kustomize through an overlay that gives them the unseen config,
// and proves the PrometheusRule of the output pages for its names.
func TestKustomizeRulesFitAnyConfig(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is not installed (apt-get install -y kubernetes-client): %v", err)
	}
	base, err := filepath.Abs(filepath.Join(repoRoot, "deploy", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, err := os.ReadFile("testdata/unseen.yml")
	if err != nil {
		t.Fatal(err)
	}
	// kustomize reads a base only below the overlay: link it in.
	if err := os.Symlink(base, filepath.Join(dir, "base")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "outbox_exporter.yml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := "resources: [base]\nconfigMapGenerator:\n- name: outbox-exporter-config\n  behavior: replace\n  files: [outbox_exporter.yml]\n  options: {disableNameSuffixHash: true}\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	objs := map[string]any{}
	for _, doc := range splitDocs(string(out)) {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var head struct{ APIVersion, Kind string }
		if err := json.Unmarshal(js, &head); err != nil {
			t.Fatal(err)
		}
		v, err := newOf(head.APIVersion, head.Kind)
		if err != nil {
			t.Fatal(err)
		}
		d := json.NewDecoder(bytes.NewReader(js))
		d.DisallowUnknownFields()
		if err := d.Decode(v); err != nil {
			t.Fatalf("%s does not decode strictly: %v", head.Kind, err)
		}
		objs[head.Kind] = v
	}
	if cm, ok := objs["ConfigMap"].(*corev1.ConfigMap); !ok || !strings.Contains(cm.Data["outbox_exporter.yml"], "ledger_events:") {
		t.Fatalf("the overlay did not replace the config:\n%s", out)
	}
	checkKustomizeHA(t, objs)
	rule, ok := objs["PrometheusRule"].(*monitoringv1.PrometheusRule)
	if !ok {
		t.Fatalf("kubectl kustomize renders no PrometheusRule:\n%s", out)
	}
	proveRules(t, rule.Spec)
}

// checkKustomizeHA: two replicas with a PodDisruptionBudget that keeps one,
// and the release label kube-prometheus-stack selects monitoring objects by.
func checkKustomizeHA(t *testing.T, objs map[string]any) {
	t.Helper()
	dep, ok := objs["Deployment"].(*appsv1.Deployment)
	if !ok || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("want a Deployment of 2 replicas: %v", ok)
	}
	pdb, ok := objs["PodDisruptionBudget"].(*policyv1.PodDisruptionBudget)
	if !ok || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "outbox-exporter" {
		t.Errorf("want a PodDisruptionBudget keeping 1 of the exporter's pods: %v", ok)
	}
	sm, _ := objs["ServiceMonitor"].(*monitoringv1.ServiceMonitor)
	pr, _ := objs["PrometheusRule"].(*monitoringv1.PrometheusRule)
	if sm == nil || pr == nil || sm.Labels["release"] == "" || pr.Labels["release"] == "" {
		t.Error("the ServiceMonitor and the PrometheusRule lack the release label kube-prometheus-stack selects by")
	}
}
