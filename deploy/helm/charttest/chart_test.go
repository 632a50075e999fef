package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../outbox-exporter"

// object is one rendered manifest: its template, kind and decoded value.
type object struct {
	template string
	kind     string
	name     string
	value    any
}

// newOf returns a pointer to the Go type of a kind the chart may render;
// a kind without one is an error.
func newOf(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	}
	return nil, fmt.Errorf("no Go type for %s %s", apiVersion, kind)
}

// render renders the chart with values over its defaults, as
// `helm template` does, and decodes every object strictly: an unknown
// field, a wrong type or an unknown kind is an error.
func render(t *testing.T, values map[string]any) []object {
	t.Helper()
	out, err := renderFiles(t, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var objs []object
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		for _, doc := range splitDocs(out[n]) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			js, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", n, err, doc)
			}
			if err := json.Unmarshal(js, &head); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			v, err := newOf(head.APIVersion, head.Kind)
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			d := json.NewDecoder(bytes.NewReader(js))
			d.DisallowUnknownFields()
			if err := d.Decode(v); err != nil {
				t.Fatalf("%s: %s %s does not decode strictly: %v\n%s", n, head.Kind, head.Metadata.Name, err, doc)
			}
			objs = append(objs, object{template: n, kind: head.Kind, name: head.Metadata.Name, value: v})
		}
	}
	return objs
}

// renderFiles renders the chart with values over its defaults, as `helm
// template` does, into its files by name; a template's fail is the error.
func renderFiles(t *testing.T, values map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "outbox", Namespace: "monitoring", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render chart: %w", err)
	}
	return out, nil
}

// splitDocs splits a rendered template into its non-empty YAML documents.
func splitDocs(s string) []string {
	var out []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		trimmed := strings.TrimSpace(d)
		empty := true
		for _, line := range strings.Split(trimmed, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
			}
		}
		if !empty {
			out = append(out, d)
		}
	}
	return out
}

func byKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// TestChartDefaults renders the chart with its defaults.
func TestChartDefaults(t *testing.T) {
	objs := render(t, nil)
	deps := byKind(objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments", len(deps))
	}
	dep := deps[0].value.(*appsv1.Deployment)
	if *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *dep.Spec.Replicas)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":v") {
		t.Errorf("image %q is not a version tag", c.Image)
	}
	if dep.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("no checksum/config annotation")
	}
	secretEnv := map[string]bool{}
	for _, e := range c.Env {
		if e.Value != "" {
			t.Errorf("env %s carries a value, not a Secret reference", e.Name)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secretEnv[e.Name] = true
		}
	}
	for _, v := range []string{"OUTBOX_DSN", "SEARCH_DSN"} {
		if !secretEnv[v] {
			t.Errorf("%s is not taken from a Secret", v)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("root filesystem is writable")
	}
	if len(byKind(objs, "Secret")) != 0 {
		t.Error("the chart renders a Secret; DSNs must come by reference")
	}
	pdbs := byKind(objs, "PodDisruptionBudget")
	if len(pdbs) != 1 || pdbs[0].value.(*policyv1.PodDisruptionBudget).Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("want one PodDisruptionBudget with minAvailable 1 for two replicas, got %d", len(pdbs))
	}
	dashboards := 0
	for _, o := range byKind(objs, "ConfigMap") {
		cm := o.value.(*corev1.ConfigMap)
		if cm.Labels["grafana_dashboard"] == "1" {
			dashboards++
			for k, v := range cm.Data {
				var d map[string]any
				if err := json.Unmarshal([]byte(v), &d); err != nil || d["uid"] == nil {
					t.Errorf("ConfigMap %s key %s is not a dashboard: %v", cm.Name, k, err)
				}
			}
		}
	}
	if dashboards != 5 {
		t.Errorf("%d dashboard ConfigMaps, want 5", dashboards)
	}
	for _, k := range []string{"ServiceMonitor", "PrometheusRule", "NetworkPolicy"} {
		if n := len(byKind(objs, k)); n != 0 {
			t.Errorf("%s rendered by default (%d)", k, n)
		}
	}
}

// TestChartOptional turns on the ServiceMonitor, the PrometheusRule and
// the NetworkPolicy, and checks what they carry.
func TestChartOptional(t *testing.T) {
	objs := render(t, map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
		"prometheusRule": map[string]any{"enabled": true},
		"networkPolicy":  map[string]any{"enabled": true},
	})
	sms := byKind(objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors", len(sms))
	}
	sm := sms[0].value.(*monitoringv1.ServiceMonitor)
	if sm.Labels["release"] != "kube-prometheus" || len(sm.Spec.Endpoints) != 1 {
		t.Errorf("ServiceMonitor: %+v", sm.ObjectMeta.Labels)
	}
	relabeled := false
	for _, r := range sm.Spec.Endpoints[0].RelabelConfigs {
		if r.TargetLabel == "job" && r.Replacement != nil && *r.Replacement == "outbox_exporter" {
			relabeled = true
		}
	}
	if !relabeled {
		t.Error("the ServiceMonitor does not set job=outbox_exporter")
	}
	prs := byKind(objs, "PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("%d PrometheusRules", len(prs))
	}
	pr := prs[0].value.(*monitoringv1.PrometheusRule)
	alerts := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts++
			}
		}
	}
	if alerts < 20 {
		t.Errorf("the PrometheusRule has %d alerts", alerts)
	}
	nps := byKind(objs, "NetworkPolicy")
	if len(nps) != 1 || len(nps[0].value.(*networkingv1.NetworkPolicy).Spec.Egress) < 2 {
		t.Errorf("want a NetworkPolicy allowing DNS and the configured egress")
	}
}

// TestChartConfigRollsPods: a changed config changes the pods' checksum
// annotation, so the Deployment rolls.
func TestChartConfigRollsPods(t *testing.T) {
	sum := func(objs []object) string {
		return byKind(objs, "Deployment")[0].value.(*appsv1.Deployment).Spec.Template.Annotations["checksum/config"]
	}
	a := sum(render(t, nil))
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ch.Values["config"].(string)
	b := sum(render(t, map[string]any{"config": strings.Replace(cfg, "deadline: 5m", "deadline: 4m", 1)}))
	if a == b {
		t.Error("a changed config leaves checksum/config as it was")
	}
	one := render(t, map[string]any{"replicaCount": 1})
	if n := len(byKind(one, "PodDisruptionBudget")); n != 0 {
		t.Errorf("a PodDisruptionBudget for one replica would block every drain")
	}
}

// TestChartLint runs helm lint on the chart.
func TestChartLint(t *testing.T) {
	l := action.NewLint()
	l.Strict = true
	res := l.Run([]string{chartDir}, map[string]any{})
	for _, m := range res.Messages {
		t.Logf("%s", m)
	}
	if len(res.Errors) > 0 {
		t.Errorf("helm lint: %v", res.Errors)
	}
}
