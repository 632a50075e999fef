package charttest

import (
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// referenceValues sets every option the reference exporter charts
// (prometheus-community's postgres-exporter, kminion) offer.
var referenceValues = map[string]any{
	"serviceMonitor": map[string]any{
		"enabled": true, "namespace": "observability", "scheme": "https", "honorLabels": true,
		"labels":            map[string]any{"release": "kube-prometheus-stack"},
		"tlsConfig":         map[string]any{"serverName": "outbox.internal", "ca": map[string]any{"secret": map[string]any{"name": "outbox-ca", "key": "ca.crt"}}},
		"relabelings":       []any{map[string]any{"targetLabel": "team", "replacement": "payments"}},
		"metricRelabelings": []any{map[string]any{"sourceLabels": []any{"__name__"}, "regex": "go_.*", "action": "drop"}},
	},
	"prometheusRule":     map[string]any{"enabled": true, "namespace": "observability", "labels": map[string]any{"release": "kube-prometheus-stack"}},
	"extraVolumes":       []any{map[string]any{"name": "pg-ca", "secret": map[string]any{"secretName": "pg-ca"}}},
	"extraVolumeMounts":  []any{map[string]any{"name": "pg-ca", "mountPath": "/etc/ssl/pg", "readOnly": true}},
	"podSecurityContext": map[string]any{"runAsNonRoot": true, "runAsUser": 1000700000},
	"securityContext":    map[string]any{"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false, "runAsUser": 1000700000},
	"serviceAccount":     map[string]any{"create": true, "name": "outbox-reader", "annotations": map[string]any{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}},
	"podLabels":          map[string]any{"team": "payments"},
	"priorityClassName":  "monitoring-critical",
	"service":            map[string]any{"annotations": map[string]any{"prometheus.io/scrape": "false"}},
	"livenessProbe":      map[string]any{"httpGet": map[string]any{"path": "/-/healthy", "port": "metrics"}, "periodSeconds": 30},
	"readinessProbe":     map[string]any{"httpGet": map[string]any{"path": "/-/ready", "port": "metrics"}, "periodSeconds": 15},
	"existingSecret":     "outbox-config",
}

// TestChartDefaultsForceNoUser: by default no uid is fixed (OpenShift's
// restricted policy refuses one), the pods run as their own
// ServiceAccount without a token, and the config comes from the chart's
// ConfigMap.
func TestChartDefaultsForceNoUser(t *testing.T) {
	objs := render(t, nil)
	dep := byKind(objs, "Deployment")[0].value.(*appsv1.Deployment)
	pod := dep.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsUser != nil || pod.SecurityContext.FSGroup != nil {
		t.Errorf("the pod's securityContext fixes a uid or fsGroup: %+v", pod.SecurityContext)
	}
	if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("the pod may run as root")
	}
	if c := pod.Containers[0].SecurityContext; c == nil || c.RunAsUser != nil {
		t.Errorf("the container's securityContext fixes a uid: %+v", c)
	}
	sas := byKind(objs, "ServiceAccount")
	if len(sas) != 1 || pod.ServiceAccountName != sas[0].name {
		t.Errorf("pods run as %q, ServiceAccounts %d", pod.ServiceAccountName, len(sas))
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pods mount a ServiceAccount token they do not need")
	}
	if cm := pod.Volumes[0].ConfigMap; cm == nil || cm.Name != "outbox-outbox-exporter-config" {
		t.Errorf("config volume %+v", pod.Volumes[0])
	}
	if pod.Containers[0].LivenessProbe.HTTPGet.Path != "/-/healthy" || pod.Containers[0].ReadinessProbe.HTTPGet.Path != "/-/ready" {
		t.Error("default probes lost")
	}
}

// TestChartReferenceOptions sets every option and checks each reaches
// the object it is for.
func TestChartReferenceOptions(t *testing.T) {
	objs := render(t, referenceValues)
	sm := byKind(objs, "ServiceMonitor")[0].value.(*monitoringv1.ServiceMonitor)
	ep := sm.Spec.Endpoints[0]
	if sm.Namespace != "observability" || len(sm.Spec.NamespaceSelector.MatchNames) != 1 || sm.Spec.NamespaceSelector.MatchNames[0] != "monitoring" {
		t.Errorf("ServiceMonitor in %q selecting %v", sm.Namespace, sm.Spec.NamespaceSelector.MatchNames)
	}
	if ep.Scheme != "https" || !ep.HonorLabels || ep.TLSConfig == nil || ep.TLSConfig.ServerName == nil || *ep.TLSConfig.ServerName != "outbox.internal" {
		t.Errorf("endpoint scheme/honorLabels/tlsConfig: %+v", ep)
	}
	if len(ep.RelabelConfigs) != 2 || ep.RelabelConfigs[0].TargetLabel != "job" || ep.RelabelConfigs[1].TargetLabel != "team" {
		t.Errorf("relabelings %+v", ep.RelabelConfigs)
	}
	if len(ep.MetricRelabelConfigs) != 1 || ep.MetricRelabelConfigs[0].Action != "drop" {
		t.Errorf("metricRelabelings %+v", ep.MetricRelabelConfigs)
	}
	if sm.Labels["release"] != "kube-prometheus-stack" {
		t.Error("the ServiceMonitor lacks the release label")
	}
	pr := byKind(objs, "PrometheusRule")[0]
	if p := pr.value.(*monitoringv1.PrometheusRule); p.Namespace != "observability" || p.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule in %q labelled %v", p.Namespace, p.Labels)
	}
	dep := byKind(objs, "Deployment")[0].value.(*appsv1.Deployment)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != 1000700000 || c.SecurityContext.RunAsUser == nil {
		t.Error("securityContext overrides lost")
	}
	if pod.ServiceAccountName != "outbox-reader" || pod.PriorityClassName != "monitoring-critical" || dep.Spec.Template.Labels["team"] != "payments" {
		t.Errorf("serviceAccount %q, priorityClassName %q, pod labels %v", pod.ServiceAccountName, pod.PriorityClassName, dep.Spec.Template.Labels)
	}
	if sa := byKind(objs, "ServiceAccount")[0].value.(*corev1.ServiceAccount); sa.Name != "outbox-reader" || sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
		t.Errorf("ServiceAccount %+v", sa.ObjectMeta)
	}
	if c.LivenessProbe.PeriodSeconds != 30 || c.ReadinessProbe.PeriodSeconds != 15 {
		t.Error("probe overrides lost")
	}
	if len(pod.Volumes) != 2 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "outbox-config" || pod.Volumes[1].Name != "pg-ca" {
		t.Errorf("volumes %+v", pod.Volumes)
	}
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[1].MountPath != "/etc/ssl/pg" {
		t.Errorf("volume mounts %+v", c.VolumeMounts)
	}
	for _, o := range byKind(objs, "ConfigMap") {
		if strings.HasSuffix(o.name, "-config") {
			t.Errorf("ConfigMap %s rendered though the config comes from a Secret", o.name)
		}
	}
	svc := byKind(objs, "Service")[0].value.(*corev1.Service)
	if svc.Annotations["prometheus.io/scrape"] != "false" {
		t.Errorf("service annotations %v", svc.Annotations)
	}
	cm := render(t, map[string]any{"existingConfigMap": "my-config"})
	if v := byKind(cm, "Deployment")[0].value.(*appsv1.Deployment).Spec.Template.Spec.Volumes[0]; v.ConfigMap == nil || v.ConfigMap.Name != "my-config" {
		t.Errorf("existingConfigMap: volume %+v", v)
	}
}

// TestChartNotes renders NOTES.txt, which says how to reach the exporter
// and whether anything pages.
func TestChartNotes(t *testing.T) {
	for _, c := range []struct {
		values map[string]any
		want   []string
	}{
		{nil, []string{"port-forward svc/outbox-outbox-exporter 9899", "outbox_exporter check", "No ServiceMonitor", "nothing pages"}},
		{referenceValues, []string{`carries {"release":"kube-prometheus-stack"}`, "read every threshold from the exporter's series"}},
	} {
		out, err := renderFiles(t, c.values)
		if err != nil {
			t.Fatal(err)
		}
		notes := out["outbox-exporter/templates/NOTES.txt"]
		for _, w := range c.want {
			if !strings.Contains(notes, w) {
				t.Errorf("NOTES.txt lacks %q:\n%s", w, notes)
			}
		}
	}
}
