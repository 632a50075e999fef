package discover

import (
	"strings"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
)

// Column names a hand-made outbox table commonly uses, most likely first.
var (
	idNames        = []string{"id", "event_id", "message_id", "uuid"}
	createdNames   = []string{"created_at", "occurred_at", "inserted_at", "created", "created_on", "enqueued_at", "timestamp"}
	publishedNames = []string{"published_at", "processed_at", "sent_at", "dispatched_at", "delivered_at", "relayed_at"}
	deadNames      = []string{"dead_at", "failed_at", "abandoned_at"}
	statusNames    = []string{"status", "state"}
	leaseNames     = []string{"lease_until", "locked_until", "lease_expires_at"}
	claimNames     = []string{"claimed_at", "locked_at", "picked_at"}
	attemptNames   = []string{"attempts", "attempt", "retry_count", "retries", "failure_count"}
	errorNames     = []string{"last_error", "error", "error_message"}
	labelNames     = []string{"event_type", "type", "topic", "destination", "aggregate_type", "aggregatetype"}
)

// first is the first of names that t has and that ok accepts, "" if none.
func first(t Table, names []string, ok func(outboxsql.Column) bool) string {
	for _, n := range names {
		if c, has := t.Cols[n]; has && ok(c) {
			return n
		}
	}
	return ""
}

func anyType(outboxsql.Column) bool { return true }

// Generic recognises a hand-made outbox: an id, a creation timestamp, and
// either a publish time or a status column; or a table whose name says
// outbox with just an id and a creation time (rows deleted on publish).
// A table with a status but no publish time must be named as an outbox:
// any table of orders has a status and a creation time.
func Generic(t Table) (Found, bool) {
	id := first(t, idNames, anyType)
	created := first(t, createdNames, outboxsql.Column.IsTimestamp)
	if id == "" || created == "" {
		return Found{}, false
	}
	named := strings.Contains(strings.ToLower(t.Name), "outbox")
	published := first(t, publishedNames, outboxsql.Column.IsTimestamp)
	status := first(t, statusNames, func(c outboxsql.Column) bool { return c.IsText() || c.IsInteger() })
	if published == "" && !named {
		return Found{}, false
	}
	f := Found{Table: t, Keys: []string{"table: " + t.QualifiedName(), "id: " + id, "created_at: " + created}}
	if l := first(t, labelNames, outboxsql.Column.IsText); l != "" {
		name := l
		if name == "topic" {
			name = "event_topic" // the exporter sets topic itself
		}
		f.Keys = append(f.Keys, "labels: {"+name+": "+l+"}")
	}
	switch {
	case status != "":
		pending, done := "[PENDING]", "[PUBLISHED]"
		if t.Cols[status].IsInteger() {
			pending, done = "[0]", "[1]"
		}
		f.Keys = append(f.Keys, "status: "+status, "pending: "+pending, "published: "+done)
		f.Notes = append(f.Notes, "guessed: the status values "+pending+" and "+done+"; check counts the values present that are listed nowhere")
		if published != "" {
			f.Keys = append(f.Keys, "published_at: "+published)
		}
	case published != "":
		f.Keys = append(f.Keys, "published_at: "+published)
		if d := first(t, deadNames, outboxsql.Column.IsTimestamp); d != "" {
			f.Keys = append(f.Keys, "dead_at: "+d)
		}
	default:
		f.Notes = append(f.Notes, "no publish time or status: read as deleted on publish (every row present waits)")
	}
	if l := first(t, leaseNames, outboxsql.Column.IsTimestamp); l != "" {
		f.Keys = append(f.Keys, "lease_until: "+l)
	} else if c := first(t, claimNames, outboxsql.Column.IsTimestamp); c != "" {
		f.Keys = append(f.Keys, "claimed_at: "+c)
	}
	if a := first(t, attemptNames, outboxsql.Column.IsInteger); a != "" {
		f.Keys = append(f.Keys, "attempts: "+a)
	}
	if e := first(t, errorNames, outboxsql.Column.IsText); e != "" {
		f.Keys = append(f.Keys, "last_error: "+e)
	}
	return f, true
}
