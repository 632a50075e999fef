package config

import (
	"strings"
	"testing"
)

// auditYAML is base with a kafka cluster and an audit of outbox messages.
func auditYAML(extra string) string {
	return base + "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\naudit:\n  messages:\n    kafka: main\n    topics: [messages]\n" + extra
}

func TestAuditValidation(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		want        string // "" = accepted
	}{
		{"dotted json path", "    event_id: json:payload.id\n", ""},
		{"deep json path", "    event_id: json:a.b.c\n", ""},
		{"plain json field", "    event_id: json:event_id\n", ""},
		{"empty json segment", "    event_id: json:payload..id\n", `audit.messages.event_id: is not header:NAME`},
		{"leading dot", "    event_id: json:.id\n", `audit.messages.event_id: is not header:NAME`},
		{"trailing dot", "    event_id: json:payload.\n", `audit.messages.event_id: is not header:NAME`},
		{"grace equal to window", "    event_id: key\n    grace: 1h\n    window: 1h\n", "audit.messages.grace: must be shorter than window"},
		{"grace longer than window", "    event_id: key\n    grace: 2h\n", "audit.messages.grace: must be shorter than window"},
		{"grace shorter than window", "    event_id: key\n    grace: 59m\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(auditYAML(tc.extra)), env(nil))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted:\n%s", tc.extra)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error does not contain %q:\n%v", tc.want, err)
			}
		})
	}
}
