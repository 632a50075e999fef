package demo

import (
	"encoding/json"
	"fmt"
	"strings"
)

// configYAML writes the exporter configuration that watches
// a demo pipeline: its outbox, both consumer groups, a reconcile job of
// messages against search_index, and an audit of the outbox against the
// topic with every event sampled.
func configYAML(dsn string, brokers []string, o Options) []byte {
	var b strings.Builder
	b.WriteString("# Written by outbox_exporter demo for its own pipeline.\n")
	for _, section := range []string{
		databasesYAML(dsn),
		outboxesYAML(o),
		kafkaYAML(brokers, o),
		reconcileYAML(o),
		auditYAML(o),
	} {
		b.WriteString(section)
	}
	return []byte(b.String())
}

// yq quotes s: a JSON string is a YAML double-quoted scalar.
func yq(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// yList is ss as a YAML flow sequence of quoted strings.
func yList(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = yq(s)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func databasesYAML(dsn string) string {
	return fmt.Sprintf(`databases:
  demo:
    dsn: %s
    max_connections: 3
    statement_timeout: 5s
`, yq(dsn))
}

func outboxesYAML(o Options) string {
	return fmt.Sprintf(`
outboxes:
  messages:
    database: demo
    table: public.outbox
    id: event_id
    created_at: created_at
    labels:
      event_type: event_type
      destination: topic
    status: status
    pending: [PENDING]
    in_flight: [CLAIMED]
    published: [PUBLISHED]
    dead: [ABANDONED]
    published_at: published_at
    lease_until: lease_until
    attempts: attempts
    last_error: last_error
    # a relay that lost an acknowledgement writes this and waits before retrying
    unknown_when: %s
    deadline: %s
    max_label_values: 20
    # a message's events in version order; the relays record the broker's receipt
    aggregate: message_id
    sequence: message_version
    receipt: receipt
`, yq("status = 'PENDING' AND last_error LIKE '"+unknownResultPrefix+"%'"), o.OutboxDeadline)
}

func kafkaYAML(brokers []string, o Options) string {
	return fmt.Sprintf(`
kafka:
  demo:
    brokers: %s
    groups: [%s, %s]
    topics: [%s]
    deadline: %s
    deadlines: {%s: %s}
`, yList(brokers), GroupSearchIndex, GroupNotify, yq(o.Topic), o.GroupDeadline, GroupNotify, o.NotifyDeadline)
}

func reconcileYAML(o Options) string {
	return fmt.Sprintf(`
reconcile:
  search_index:
    schedule: %s
    window: 1h
    grace: %s
    authority: {database: demo, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: demo, table: public.search_index, key: message_id, version: version}
`, yq(o.ReconcileSchedule), o.ReconcileGrace)
}

func auditYAML(o Options) string {
	return fmt.Sprintf(`
audit:
  messages:
    kafka: demo
    topics: [%s]
    event_id: header:event_id
    sample: 1.0
    grace: %s
    window: %s
    aggregate: key
    sequence: json:version
`, yq(o.Topic), o.AuditGrace, o.AuditWindow)
}
