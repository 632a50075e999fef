package config

import (
	"strings"
	"testing"
)

// TestKafkaIsolation: isolation by default, overridden per group; a bad
// value is named by key and line, and not repeated.
func TestKafkaIsolation(t *testing.T) {
	k := &Kafka{Isolation: IsolationReadUncommitted, Isolations: map[string]string{"strict": IsolationReadCommitted}}
	if !k.ReadUncommitted("any") || k.ReadUncommitted("strict") {
		t.Fatalf("isolation read_uncommitted with strict read_committed: any %v, strict %v", k.ReadUncommitted("any"), k.ReadUncommitted("strict"))
	}
	k = &Kafka{Isolations: map[string]string{"loose": IsolationReadUncommitted}}
	if k.ReadUncommitted("any") || !k.ReadUncommitted("loose") {
		t.Fatalf("default read_committed with loose read_uncommitted: any %v, loose %v", k.ReadUncommitted("any"), k.ReadUncommitted("loose"))
	}
	const yaml = "kafka:\n  main:\n    brokers: [127.0.0.1:9092]\n    isolations: {notify: secret-typo}\n"
	_, err := Parse([]byte(yaml), env(nil))
	if err == nil || !strings.Contains(err.Error(), "kafka.main.isolations.notify") || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("error %v; want the key and line 4", err)
	}
	if strings.Contains(err.Error(), "secret-typo") {
		t.Fatalf("error repeats the value: %v", err)
	}
}
