package config

import (
	"maps"
	"regexp"
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

// MaxDashboardUIDPrefix is the longest alerting.dashboard_uid_prefix:
// Grafana's 40 characters less the longest dashboard uid of our own
// ("outbox-consumers", "outbox-reconcile").
const MaxDashboardUIDPrefix = 24

// uidPrefixRe is what a dashboard uid prefix may hold.
var uidPrefixRe = regexp.MustCompile(`^[A-Za-z0-9_-]{0,24}$`)

// alerting checks the alerting section: the cluster label must be a label
// name that none of the exporter's metrics already use.
func (v *validator) alerting(p string, a *Alerting) {
	if !uidPrefixRe.MatchString(a.DashboardUIDPrefix) {
		v.fail(p+".dashboard_uid_prefix", "must be at most %d letters, digits, '-' or '_' (Grafana's uids are at most 40 characters, and the dashboards' own part takes %d)", MaxDashboardUIDPrefix, 40-MaxDashboardUIDPrefix)
	}
	cl := strings.TrimSpace(a.ClusterLabel)
	if cl == "" {
		return
	}
	path := p + ".cluster_label"
	if !labelRe.MatchString(cl) || strings.HasPrefix(cl, "__") {
		v.fail(path, "is not a Prometheus label name")
		return
	}
	if slices.Contains(exporterLabels, cl) {
		v.fail(path, "is a label of outbox_exporter's own metrics (%q names the Kafka cluster); choose another, e.g. k8s_cluster", "cluster")
		return
	}
	for _, name := range slices.Sorted(maps.Keys(v.c.Outboxes)) {
		for _, l := range v.c.Outboxes[name].Labels {
			if l.Name == cl {
				v.fail(path, "is a label of outbox %s; choose another", name)
			}
		}
	}
}
