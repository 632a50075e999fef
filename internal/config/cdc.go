package config

import (
	"maps"
	"regexp"
	"slices"
	"time"
)

// CDC is an outbox published by change data capture (Debezium and the
// like) through a logical replication slot: the slot's position is the
// pipeline's pending backlog, hidden behind the log position. The exporter only reads the slot;
// it never creates, advances or drops one.
type CDC struct {
	Database string `yaml:"database"`
	// Slot is the logical replication slot the connector streams from.
	Slot string `yaml:"slot"`
	// Deadline is how far behind the slot may fall, in time, before the
	// generated alert pages.
	Deadline time.Duration `yaml:"deadline"`
	// Outbox optionally names an outbox of the outboxes section that keeps
	// its rows and is published through this slot: with
	// track_commit_timestamp on, its rows committed after the time the
	// slot has confirmed are the ones still pending.
	Outbox string `yaml:"outbox"`
}

// slotNameRe is what PostgreSQL accepts as a replication slot name.
var slotNameRe = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// cdcs validates the cdc section.
func (v *validator) cdcs() {
	slots := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(v.c.CDC)) {
		c, p := v.c.CDC[name], "cdc."+name
		if !labelValueOK(name) {
			v.fail(p, "is not a valid cdc name")
		}
		v.database(p+".database", c.Database)
		if v.required(p+".slot", c.Slot) {
			if !slotNameRe.MatchString(c.Slot) {
				v.fail(p+".slot", "is not a replication slot name (lower-case letters, digits and _, at most 63)")
			} else if other, dup := slots[c.Database+"\x00"+c.Slot]; dup {
				v.fail(p+".slot", "the same slot of the same database is already watched by cdc.%s", other)
			} else {
				slots[c.Database+"\x00"+c.Slot] = name
			}
		}
		if c.Deadline <= 0 {
			v.fail(p+".deadline", "is required: how far behind the slot may fall, e.g. 5m")
		}
		if c.Outbox != "" {
			o, ok := v.c.Outboxes[c.Outbox]
			switch {
			case !ok:
				v.fail(p+".outbox", "names no outbox defined under outboxes")
			case o.Database != c.Database:
				v.fail(p+".outbox", "names an outbox on another database than the slot's")
			case o.NoCreatedAt():
				v.fail(p+".outbox", "names an outbox with no created_at: the rows behind a slot are read as a range of their creation time")
			case o.Style() != StyleDeleteOnPublish:
				v.fail(p+".outbox", "names an outbox with a status or published_at: rows behind a slot are read from tables where a connector, not a relay, publishes them")
			}
		}
	}
}

// CDCFor returns the cdc entry that publishes outbox name, if any.
func (c *Config) CDCFor(outbox string) (string, *CDC, bool) {
	for _, name := range slices.Sorted(maps.Keys(c.CDC)) {
		if c.CDC[name].Outbox == outbox {
			return name, c.CDC[name], true
		}
	}
	return "", nil, false
}
