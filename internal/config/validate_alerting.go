package config

import (
	"maps"
	"slices"
	"strings"
)

// exporterLabels are the labels outbox_exporter's own metrics carry (and
// Prometheus's target labels): a cluster label of one of these names would
// be overwritten by, or overwrite, the exporter's meaning of it. "cluster"
// is the Kafka cluster's name here, not the Prometheus cluster's.
var exporterLabels = []string{
	"cdc", "cluster", "collector", "goversion", "group", "instance", "job", "kind", "le",
	"outbox", "partition", "protocol", "reconcile", "revision", "state", "status", "target",
	"task", "topic", "version",
}

// alerting checks the alerting section: the cluster label must be a label
// name that none of the exporter's metrics already use.
func (v *validator) alerting(p string, a *Alerting) {
	cl := strings.TrimSpace(a.ClusterLabel)
	if cl == "" {
		return
	}
	path := p + ".cluster_label"
	if !labelRe.MatchString(cl) || strings.HasPrefix(cl, "__") {
		v.fail(path, "%q is not a Prometheus label name", cl)
		return
	}
	if slices.Contains(exporterLabels, cl) {
		v.fail(path, "%q is a label of outbox_exporter's own metrics (%q names the Kafka cluster); choose another, e.g. k8s_cluster", cl, "cluster")
		return
	}
	for _, name := range slices.Sorted(maps.Keys(v.c.Outboxes)) {
		for _, l := range v.c.Outboxes[name].Labels {
			if l.Name == cl {
				v.fail(path, "%q is a label of outbox %s; choose another", cl, name)
			}
		}
	}
}
