package config

import (
	"strings"
	"testing"
)

// TestParseWithoutSecrets: generate builds from a config whose DSN and
// SASL password variables are unset, but an unset variable in a value
// that shapes the output is still an error naming it, and Parse (serve,
// check) still refuses the unset DSN.
func TestParseWithoutSecrets(t *testing.T) {
	const yml = `
databases:
  db: {dsn: "${NOT_SET_DSN}"}
kafka:
  k:
    brokers: [127.0.0.1:9092]
    sasl: {mechanism: PLAIN, username: u, password: "${NOT_SET_PASSWORD}"}
    groups: [g]
outboxes:
  o:
    database: db
    table: outbox
    id: id
    created_at: created_at
    deadline: 1m
alerting:
  cluster_label: k8s_cluster
`
	none := func(string) (string, bool) { return "", false }
	cfg, err := ParseWithoutSecrets([]byte(yml), none)
	if err != nil {
		t.Fatalf("ParseWithoutSecrets: %v", err)
	}
	if got := cfg.Databases["db"].DSN.Reveal(); got != "${NOT_SET_DSN}" {
		t.Errorf("dsn = %q, want the reference kept", got)
	}
	if _, err := Parse([]byte(yml), none); err == nil || !strings.Contains(err.Error(), "NOT_SET_DSN is not set") {
		t.Errorf("Parse accepted an unset DSN variable: %v", err)
	}
	bad := strings.Replace(yml, "deadline: 1m", "deadline: ${NOT_SET_DEADLINE}", 1)
	if _, err := ParseWithoutSecrets([]byte(bad), none); err == nil || !strings.Contains(err.Error(), "outboxes.o.deadline") {
		t.Errorf("an unset variable outside secrets was accepted: %v", err)
	}
}

func TestClusterLabelValidation(t *testing.T) {
	const base = `
databases:
  db: {dsn: "postgres://x@localhost/db"}
outboxes:
  o:
    database: db
    table: outbox
    id: id
    created_at: created_at
    labels: {event_type: event_type}
    deadline: 1m
alerting:
  cluster_label: `
	none := func(string) (string, bool) { return "", false }
	for label, want := range map[string]string{
		"k8s_cluster": "",
		"cluster":     "label of outbox_exporter's own metrics",
		"event_type":  "label of outbox o",
		"9lives":      "not a Prometheus label name",
	} {
		_, err := Parse([]byte(base+label+"\n"), none)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", label, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), "alerting.cluster_label") || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v, want an error on alerting.cluster_label containing %q", label, err, want)
		}
	}
}
