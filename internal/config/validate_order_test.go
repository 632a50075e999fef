package config

import (
	"strings"
	"testing"
)

const orderAudit = "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\naudit:\n  messages:\n    kafka: main\n    topics: [messages]\n    event_id: header:event_id\n    sample: 1\n"

func withOutboxKeys(keys string) string {
	return strings.Replace(base, "    deadline: 5m", "    deadline: 5m\n"+keys, 1)
}

// The order and receipt keys are accepted in their documented forms and
// refused, naming the key, when one of a pair is missing or a form is bad.
func TestOrderKeys(t *testing.T) {
	good := withOutboxKeys("    published_at: published_at\n    aggregate: conversation_id\n    sequence: seq\n    receipt: receipt_id") +
		orderAudit + "    aggregate: header:conversation\n    sequence: json:payload.seq\n"
	cfg, err := Parse([]byte(good), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	o, a := cfg.Outboxes["messages"], cfg.Audit["messages"]
	if o.Aggregate != "conversation_id" || o.Sequence != "seq" || o.Receipt != "receipt_id" ||
		a.Aggregate != "header:conversation" || a.Sequence != "json:payload.seq" {
		t.Errorf("keys not read: %+v %+v", o, a)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"aggregate without sequence", withOutboxKeys("    aggregate: conversation_id"), "outboxes.messages.sequence: is required with aggregate"},
		{"sequence without aggregate", withOutboxKeys("    sequence: seq"), "outboxes.messages.aggregate: is required with sequence"},
		{"same column", withOutboxKeys("    aggregate: seq\n    sequence: seq"), `outboxes.messages.sequence: must be another column than aggregate`},
		{"bad column", withOutboxKeys("    aggregate: \"a; DROP\"\n    sequence: seq"), "outboxes.messages.aggregate"},
		{"receipt without published_at", withOutboxKeys("    receipt: receipt_id"), "outboxes.messages.receipt: needs published_at"},
		{"audit bad form", base + orderAudit + "    aggregate: body\n    sequence: key\n", `audit.messages.aggregate: is not header:NAME, key or json:PATH`},
		{"audit half pair", base + orderAudit + "    sequence: header:seq\n", "audit.messages.aggregate: is required with sequence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
