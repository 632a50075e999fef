package generate

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"gopkg.in/yaml.v3"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/dashboards"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

var update = flag.Bool("update", false, "rewrite deploy/ from deploy/example.yml")

const deployDir = "../deploy"

// exampleConfig loads deploy/example.yml with fixed DSNs.
func exampleConfig(t *testing.T) *config.Config {
	return testutil.ExampleConfig(t, filepath.Join(deployDir, "example.yml"))
}

// requireTool finds a binary the checks run, failing (not skipping) with
// how to install it when it is missing.
var requireTool = testutil.RequireTool

// deployFiles are the generated files under deploy/: the dashboards made
// for example.yml and the rules that serve any config, without a selector
// (so any job label), linking to the example's runbook.
func deployFiles(t *testing.T) map[string][]byte {
	t.Helper()
	cfg := exampleConfig(t)
	files, err := Files(cfg)
	if err != nil {
		t.Fatal(err)
	}
	generic, err := GenericFiles(config.Alerting{RunbookURL: cfg.Alerting.RunbookURL})
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(files, generic)
	return files
}

func TestDeployIsCurrent(t *testing.T) {
	files := deployFiles(t)
	if *update {
		if err := WriteFiles(files, deployDir); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(deployDir, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("deploy/%s: %v (run go test ./generate -update)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/%s is not the current output of generate for deploy/example.yml; run go test ./generate -update", name)
		}
	}
	// A dashboard left behind by an older generator would be provisioned too.
	entries, err := os.ReadDir(filepath.Join(deployDir, DashboardDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files[DashboardDir+"/"+e.Name()]; !ok {
			t.Errorf("deploy/%s/%s is not generated any more; remove it", DashboardDir, e.Name())
		}
	}
}

func TestWrite(t *testing.T) {
	cfg := exampleConfig(t)
	dir := filepath.Join(t.TempDir(), "out")
	if err := Write(cfg, dir); err != nil {
		t.Fatal(err)
	}
	files, err := Files(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var written []string
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		written = append(written, filepath.ToSlash(rel))
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, files[filepath.ToSlash(rel)]) {
			t.Errorf("%s differs from what Files renders", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for name := range files {
		want = append(want, name)
	}
	sort.Strings(want)
	if strings.Join(written, "\n") != strings.Join(want, "\n") {
		t.Errorf("wrote\n%s\nwant\n%s", strings.Join(written, "\n"), strings.Join(want, "\n"))
	}
	for _, name := range []string{RulesFile, DashboardDir + "/outbox-overview.json", PrometheusRuleFile} {
		if _, ok := files[name]; !ok {
			t.Errorf("%s not generated", name)
		}
	}
}

func TestWriteFailureNamesFileAndLeavesNothing(t *testing.T) {
	cfg := exampleConfig(t)
	dir := t.TempDir()
	// A regular file where the dashboards directory belongs: the first
	// rename fails, and the rules (renamed after it) must stay unwritten.
	if err := os.WriteFile(filepath.Join(dir, DashboardDir), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(cfg, dir)
	if err == nil {
		t.Fatal("Write succeeded with a file in the way")
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, DashboardDir)) {
		t.Errorf("error does not name the file: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != DashboardDir {
			t.Errorf("left %s behind", e.Name())
		}
	}

	// An output directory that cannot be created is named too.
	blocked := filepath.Join(dir, DashboardDir, "sub")
	if err := Write(cfg, blocked); err == nil || !strings.Contains(err.Error(), blocked) {
		t.Errorf("error does not name the output directory: %v", err)
	}
}

// panelsOf returns the panels of a dashboard's JSON, rows' nested panels
// included, rows excluded.
func panelsOf(d map[string]any) []map[string]any {
	var out []map[string]any
	var walk func([]any)
	walk = func(ps []any) {
		for _, p := range ps {
			m, _ := p.(map[string]any)
			if m["type"] == "row" {
				if sub, ok := m["panels"].([]any); ok {
					walk(sub)
				}
				continue
			}
			out = append(out, m)
		}
	}
	ps, _ := d["panels"].([]any)
	walk(ps)
	return out
}

// units the dashboards may use: Grafana unit ids.
var grafanaUnits = map[string]bool{"s": true, "short": true, "ops": true, "percentunit": true, "bool": true}

var labelValuesRe = regexp.MustCompile(`^label_values\((.+), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// generatedLint reads the .lint generate writes beside the dashboards.
func generatedLint(t *testing.T) lintExclusions {
	t.Helper()
	files, err := Files(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := loadLintExclusions(files[DashboardDir+"/"+dashboards.LintFile])
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

func generatedDashboards(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := Files(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for name, b := range files {
		if strings.HasPrefix(name, DashboardDir+"/") && strings.HasSuffix(name, ".json") {
			out[name] = b
		}
	}
	if len(out) != 5 {
		t.Fatalf("generated %d dashboards for the example, want 5", len(out))
	}
	return out
}

// TestDashboardsLint checks the rules of grafana/dashboard-linter on the
// generated JSON, and that every query names only exported metrics.
func TestDashboardsLint(t *testing.T) {
	known := exportedMetrics(t)
	ex := generatedLint(t)
	for rule, entries := range ex {
		// Only panels reading a recording rule may skip the instance
		// matcher; nothing else is excluded.
		if rule != "target-instance-rule" || len(entries) != 1 {
			t.Errorf(".lint excludes %s for %v", rule, entries)
		}
	}
	uids := map[string]string{}
	for name, raw := range generatedDashboards(t) {
		for _, p := range lintDashboard(raw, known, ex) {
			t.Errorf("%s: %s", name, p)
		}
		var d struct {
			UID string `json:"uid"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		if other, dup := uids[d.UID]; dup || d.UID == "" {
			t.Errorf("%s: uid %q missing or shared with %s", name, d.UID, other)
		}
		uids[d.UID] = name
	}
}

// TestLintDashboardFindsProblems breaks a generated dashboard in the ways
// the linter rules forbid and checks that lintDashboard notices each.
func TestLintDashboardFindsProblems(t *testing.T) {
	known := exportedMetrics(t)
	raw := generatedDashboards(t)[DashboardDir+"/outbox-consumers.json"]
	if p := lintDashboard(raw, known, nil); len(p) > 0 {
		t.Fatalf("the generated dashboard fails: %v", p)
	}
	firstPanel := func(d map[string]any) map[string]any { return panelsOf(d)[0] }
	for _, c := range []struct {
		name   string
		break_ func(d map[string]any)
		want   string
	}{
		{"no description", func(d map[string]any) { delete(firstPanel(d), "description") }, "no description"},
		{"no unit", func(d map[string]any) {
			delete(firstPanel(d)["fieldConfig"].(map[string]any)["defaults"].(map[string]any), "unit")
		}, "has unit"},
		{"fixed datasource", func(d map[string]any) { firstPanel(d)["datasource"] = map[string]any{"uid": "prom-1"} }, "does not use ${datasource}"},
		{"job not multi", func(d map[string]any) { variable(d, "job")["multi"] = false }, "template-job-rule"},
		{"instance all value", func(d map[string]any) { variable(d, "instance")["allValue"] = "" }, "template-instance-rule"},
		{"job labelled in lower case", func(d map[string]any) { variable(d, "job")["label"] = "job" }, "template-job-rule"},
		{"group not refreshed", func(d map[string]any) { variable(d, "group")["refresh"] = 1.0 }, "template-on-time-change-reload-rule"},
		{"no instance matcher", func(d map[string]any) {
			firstPanel(d)["targets"].([]any)[0].(map[string]any)["expr"] = `max(outbox_consumer_group_members{job=~"$job"})`
		}, `lacks instance`},
		{"no datasource variable", func(d map[string]any) { variable(d, "datasource")["name"] = "ds" }, "template-datasource-rule"},
		{"editable", func(d map[string]any) { d["editable"] = true }, "editable"},
		{"raw counter", func(d map[string]any) {
			firstPanel(d)["targets"].([]any)[0].(map[string]any)["expr"] = `outbox_audit_duplicates_total{job=~"$job", instance=~"$instance"}`
		}, "outside rate()"},
	} {
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		c.break_(d)
		broken, _ := json.Marshal(d)
		if p := lintDashboard(broken, known, nil); !strings.Contains(strings.Join(p, "\n"), c.want) {
			t.Errorf("%s: got %q, want a problem containing %q", c.name, p, c.want)
		}
	}
}

func variable(d map[string]any, name string) map[string]any {
	for _, v := range d["templating"].(map[string]any)["list"].([]any) {
		if m := v.(map[string]any); m["name"] == name {
			return m
		}
	}
	return map[string]any{}
}

// lintExclusions is dashboard-linter's .lint file: rule name to the
// dashboard and panel titles it does not apply to.
type lintExclusions map[string]map[[2]string]bool

// loadLintExclusions reads the generated .lint as the linter does.
func loadLintExclusions(raw []byte) (lintExclusions, error) {
	var cfg struct {
		Exclusions map[string]struct {
			Reason  string `yaml:"reason"`
			Entries []struct {
				Dashboard string `yaml:"dashboard"`
				Panel     string `yaml:"panel"`
			} `yaml:"entries"`
		} `yaml:"exclusions"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	out := lintExclusions{}
	for rule, e := range cfg.Exclusions {
		out[rule] = map[[2]string]bool{}
		for _, en := range e.Entries {
			out[rule][[2]string{en.Dashboard, en.Panel}] = true
		}
	}
	return out, nil
}

// lintDashboard returns what in a dashboard's JSON breaks the rules of
// grafana/dashboard-linter in strict mode (warnings count):
// template-datasource-rule, template-job-rule and template-instance-rule
// (labelled "Job" and "Instance", multi, allValue ".+", on $datasource),
// template-label-promql-rule, template-on-time-change-reload-rule,
// panel-datasource-rule, panel-title-description-rule, panel-units-rule,
// panel-no-targets-rule, target-promql-rule, target-rate-interval-rule,
// target-job-rule and target-instance-rule (every selector, recording
// rules included, unless .lint excludes the panel), target-counter-agg-rule,
// uneditable-dashboard; and queries naming metrics the exporter does not
// export.
func lintDashboard(raw []byte, known *metricSet, ex lintExclusions) []string {
	var probs []string
	fail := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		return []string{err.Error()}
	}
	title, _ := d["title"].(string)
	if d["editable"] != false {
		fail("dashboard is editable")
	}
	vars := map[string]map[string]any{}
	var names []string
	tmpl, _ := d["templating"].(map[string]any)
	list, _ := tmpl["list"].([]any)
	var datasources []map[string]any
	for _, v := range list {
		m, _ := v.(map[string]any)
		n, _ := m["name"].(string)
		vars[n] = m
		names = append(names, n)
		if m["type"] == "datasource" {
			datasources = append(datasources, m)
		}
	}
	if len(datasources) != 1 || datasources[0]["name"] != "datasource" || datasources[0]["query"] != "prometheus" || datasources[0]["label"] != "Data source" {
		fail("template-datasource-rule: not one datasource variable named datasource of type prometheus labelled Data source: %v", datasources)
	}
	for _, label := range []string{"job", "instance"} {
		v := vars[label]
		if v == nil {
			fail("template-%s-rule: no %s variable", label, label)
			continue
		}
		dsRef, _ := v["datasource"].(map[string]any)
		want := strings.ToUpper(label[:1]) + label[1:]
		if v["type"] != "query" || v["label"] != want || v["multi"] != true || v["allValue"] != ".+" || (dsRef["uid"] != "${datasource}" && dsRef["uid"] != "$datasource") {
			fail("template-%s-rule: variable %s is not a multi query on $datasource labelled %q with allValue .+: %v", label, label, want, v)
		}
	}
	for _, n := range names {
		v := vars[n]
		if v["type"] != "query" {
			continue
		}
		if v["refresh"] != float64(dashboard.VariableRefreshOnTimeRangeChanged) {
			fail("template-on-time-change-reload-rule: variable %s is not refreshed on time range change", n)
		}
		q, _ := v["query"].(string)
		sm := labelValuesRe.FindStringSubmatch(q)
		if sm == nil || sm[2] != n {
			fail("template-label-promql-rule: variable %s query %q is not label_values(selector, %s)", n, q, n)
			continue
		}
		for _, p := range checkExpr(sm[1], known, exprRules{vars: names}) {
			fail("template-label-promql-rule: variable %s query %q %s", n, q, p)
		}
	}
	probs = append(probs, lintPanels(d, title, names, known, ex)...)
	return probs
}

// lintPanels checks the panel and target rules of dashboard-linter on
// every panel of d (titled title, with variables names).
func lintPanels(d map[string]any, title string, names []string, known *metricSet, ex lintExclusions) []string {
	var probs []string
	fail := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	panels := panelsOf(d)
	if len(panels) == 0 {
		fail("no panels")
	}
	ids := map[float64]bool{}
	for _, p := range panels {
		pt, _ := p["title"].(string)
		if pt == "" {
			fail("panel-title-description-rule: a panel has no title")
		}
		if desc, _ := p["description"].(string); desc == "" {
			fail("panel-title-description-rule: panel %q has no description", pt)
		}
		id, _ := p["id"].(float64)
		if id == 0 || ids[id] {
			fail("panel %q id %v missing or repeated", pt, p["id"])
		}
		ids[id] = true
		fc, _ := p["fieldConfig"].(map[string]any)
		defaults, _ := fc["defaults"].(map[string]any)
		if unit, _ := defaults["unit"].(string); !grafanaUnits[unit] {
			fail("panel-units-rule: panel %q has unit %q", pt, unit)
		}
		if ds, _ := p["datasource"].(map[string]any); ds["uid"] != "${datasource}" {
			fail("panel-datasource-rule: panel %q does not use ${datasource}: %v", pt, p["datasource"])
		}
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			fail("panel-no-targets-rule: panel %q has no queries", pt)
		}
		rules := exprRules{dashboard: true, vars: names, noInstance: ex["target-instance-rule"][[2]string{title, pt}]}
		for _, tg := range targets {
			m, _ := tg.(map[string]any)
			if ds, _ := m["datasource"].(map[string]any); ds["uid"] != "${datasource}" {
				fail("panel-datasource-rule: panel %q query %v does not use ${datasource}", pt, m["refId"])
			}
			expr, _ := m["expr"].(string)
			for _, prob := range checkExpr(expr, known, rules) {
				fail("panel %q query %v %s:\n%s", pt, m["refId"], prob, expr)
			}
		}
	}
	return probs
}

// TestDashboardsRoundTrip loads each generated dashboard back with the
// SDK. UnmarshalJSONStrict drops every panel in v0.0.22, so this uses
// json.Unmarshal with the default plugins registered, then Validate.
func TestDashboardsRoundTrip(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	for name, raw := range generatedDashboards(t) {
		var d dashboard.Dashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Errorf("%s: unmarshal: %v", name, err)
			continue
		}
		if err := d.Validate(); err != nil {
			t.Errorf("%s: validate: %v", name, err)
		}
		again, err := dashboards.Marshal(d)
		if err != nil {
			t.Errorf("%s: marshal: %v", name, err)
			continue
		}
		if !bytes.Equal(again, raw) {
			t.Errorf("%s changes in a round trip through the SDK", name)
		}
	}
}

// exportedMetrics is the exporter's metric list plus what the rules record
// and Prometheus's own up.
func exportedMetrics(t *testing.T) *metricSet {
	t.Helper()
	known, err := loadMetrics(exportedMetricsFile)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := alerts.Build(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alerts.RecordNames(rules) {
		known.names[r] = true
	}
	known.names["up"] = true
	return known
}

func TestRuleExpressions(t *testing.T) {
	known := exportedMetrics(t)
	rules, err := alerts.Build(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	exprs := alerts.Exprs(rules)
	if len(exprs) < 20 {
		t.Fatalf("only %d rules", len(exprs))
	}
	generic, err := alerts.Generic(config.Alerting{})
	if err != nil {
		t.Fatal(err)
	}
	for name, expr := range alerts.Exprs(generic) {
		exprs["generic "+name] = expr
	}
	// The golden /metrics comes from a config without a cdc section; the
	// slot's metrics are checked by collectors/cdc's own tests.
	for _, n := range []string{vocab.CDCSlotLagSeconds, vocab.CDCDeadline, vocab.CDCSlotActive, vocab.CDCSlotWALStatus, vocab.CDCSlotMissing} {
		known.names[n] = true
	}
	for name, expr := range exprs {
		for _, p := range checkExpr(expr, known, exprRules{}) {
			t.Errorf("%s %s:\n%s", name, p, expr)
		}
	}
}

// TestCheckExprFindsProblems proves the checks above can fail.
func TestCheckExprFindsProblems(t *testing.T) {
	known, err := loadMetrics(exportedMetricsFile)
	if err != nil {
		t.Fatal(err)
	}
	dash := exprRules{dashboard: true, vars: []string{"job", "instance"}}
	for _, c := range []struct {
		expr  string
		rules exprRules
		want  string
	}{
		{`outbox_events{`, exprRules{}, "does not parse"},
		{`outbox_nonexistent`, exprRules{}, "does not export"},
		{`outbox_published_events_total`, exprRules{}, "outside rate()"},
		{`sum(outbox_publish_latency_seconds_bucket)`, exprRules{}, "outside rate()"},
		{`rate(outbox_published_events_total{job=~"$job", instance=~"$instance"}[5m])`, dash, "not $__rate_interval"},
		{`outbox_events{instance=~"$instance"}`, dash, `lacks job`},
		{`outbox_events{job=~"$job"}`, dash, `lacks instance`},
		{`outbox_events{job=~"$job", instance=~"$instance"} > $threshold`, dash, "unknown Grafana variable"},
	} {
		probs := checkExpr(c.expr, known, c.rules)
		if !strings.Contains(strings.Join(probs, "\n"), c.want) {
			t.Errorf("%s: got %q, want a problem containing %q", c.expr, probs, c.want)
		}
	}
	if p := checkExpr(`max by (outbox) (rate(outbox_published_events_total{job=~"$job", instance=~"$instance"}[$__rate_interval]))`, known, dash); len(p) > 0 {
		t.Errorf("a good expression fails: %v", p)
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool := requireTool(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", "--lint=all", "--lint-fatal", filepath.Join(deployDir, filepath.FromSlash(RulesFile))).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules --lint=all --lint-fatal: %v\n%s", err, out)
	}
}

func TestPromtoolCheckConfig(t *testing.T) {
	promtool := requireTool(t, "promtool")
	out, err := exec.Command(promtool, "check", "config", filepath.Join(deployDir, "prometheus.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config deploy/prometheus.yml: %v\n%s", err, out)
	}
}

func TestAmtoolCheckConfig(t *testing.T) {
	amtool := requireTool(t, "amtool")
	out, err := exec.Command(amtool, "check-config", filepath.Join(deployDir, "alertmanager.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("amtool check-config deploy/alertmanager.yml: %v\n%s", err, out)
	}
}

// TestGenerateNeedsNoSecrets: generate renders the same files from
// deploy/example.yml whether or not the DSNs' environment variables are
// set, since it never connects.
func TestGenerateNeedsNoSecrets(t *testing.T) {
	want, err := Files(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"OUTBOX_DSN", "SEARCH_DSN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	cfg, err := config.LoadWithoutSecrets(filepath.Join(deployDir, "example.yml"))
	if err != nil {
		t.Fatalf("load without the DSN variables: %v", err)
	}
	got, err := Files(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d files without the DSN variables, %d with", len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s differs without the DSN variables", name)
		}
	}
}

// TestDashboardsLintWithClusterLabel lints the dashboards made for a
// config with two of everything and a cluster label: the cluster
// variable and matchers must not break the linter's rules.
func TestDashboardsLintWithClusterLabel(t *testing.T) {
	cfg, err := config.LoadWithoutSecrets("../alerts/testdata/multi.yml")
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := loadLintExclusions(files[DashboardDir+"/"+dashboards.LintFile])
	if err != nil {
		t.Fatal(err)
	}
	known := exportedMetrics(t)
	n := 0
	for name, raw := range files {
		if !strings.HasPrefix(name, DashboardDir+"/") || !strings.HasSuffix(name, ".json") {
			continue
		}
		n++
		for _, p := range lintDashboard(raw, known, ex) {
			t.Errorf("%s: %s", name, p)
		}
	}
	if n != 5 {
		t.Errorf("%d dashboards, want 5", n)
	}
}
