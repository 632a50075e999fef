package demo

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// configYAML writes the exporter configuration (SPEC format) that watches
// a demo pipeline: its outbox, both consumer groups, a reconcile job of
// messages against search_index, and an audit of the outbox against the
// topic with every event sampled.
func configYAML(dsn string, brokers []string, o Options) []byte {
	q := func(s string) string { // a JSON string is a YAML double-quoted scalar
		b, _ := json.Marshal(s)
		return string(b)
	}
	list := func(ss []string) string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = q(s)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	dur := func(d time.Duration) string { return d.String() }
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by outbox_exporter demo for its own pipeline.
databases:
  demo:
    dsn: %s
    max_connections: 3
    statement_timeout: 5s

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

kafka:
  demo:
    brokers: %s
    groups: [%s, %s]
    topics: [%s]
    deadline: %s
    deadlines: {%s: %s}

reconcile:
  search_index:
    schedule: %s
    window: 1h
    grace: %s
    authority: {database: demo, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: demo, table: public.search_index, key: message_id, version: version}

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
`,
		q(dsn),
		q("status = 'PENDING' AND last_error LIKE '"+unknownResultPrefix+"%'"),
		dur(o.OutboxDeadline),
		list(brokers), GroupSearchIndex, GroupNotify, q(o.Topic), dur(o.GroupDeadline), GroupNotify, dur(o.NotifyDeadline),
		q(o.ReconcileSchedule), dur(o.ReconcileGrace),
		q(o.Topic), dur(o.AuditGrace), dur(o.AuditWindow))
	return []byte(b.String())
}
