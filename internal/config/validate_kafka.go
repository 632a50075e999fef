package config

import (
	"fmt"
	"maps"
	"slices"
)

// Uncommitted rules of kafka.NAME.uncommitted.
const (
	UncommittedIgnore   = "ignore"
	UncommittedLogStart = "log_start"
)

func (v *validator) kafkaUncommitted(p string, k *Kafka) {
	switch k.Uncommitted {
	case "", UncommittedIgnore, UncommittedLogStart:
	default:
		v.fail(p+".uncommitted", "is not one of %s (count only committed partitions, as kminion and Burrow) or %s (count a never-committed partition from its log start)",
			UncommittedIgnore, UncommittedLogStart)
	}
}

// Isolation levels of kafka.NAME.isolation and isolations.
const (
	IsolationReadCommitted   = "read_committed"
	IsolationReadUncommitted = "read_uncommitted"
)

// kafkaIsolation checks isolation and each isolations entry. The value is
// not repeated in the error: the key and line say where it is.
func (v *validator) kafkaIsolation(p string, k *Kafka) {
	ok := func(s string) bool { return s == IsolationReadCommitted || s == IsolationReadUncommitted }
	if k.Isolation != "" && !ok(k.Isolation) {
		v.fail(p+".isolation", "is not %s or %s", IsolationReadCommitted, IsolationReadUncommitted)
	}
	for _, g := range slices.Sorted(maps.Keys(k.Isolations)) {
		if g == "" {
			v.fail(p+".isolations", "a group name is empty")
			continue
		}
		if !ok(k.Isolations[g]) {
			v.fail(p+".isolations."+g, "is not %s or %s", IsolationReadCommitted, IsolationReadUncommitted)
		}
	}
	for i, g := range k.ShareGroups {
		if _, err := ParsePattern(g); err != nil {
			v.fail(fmt.Sprintf("%s.share_groups[%d]", p, i), "%v", err)
		}
	}
}
