package demo

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Outbox row statuses the demo's relays write.
const (
	StatusPending   = "PENDING"
	StatusClaimed   = "CLAIMED"
	StatusPublished = "PUBLISHED"
	StatusAbandoned = "ABANDONED"
)

// unknownResultPrefix starts the last_error of a row whose publish result
// is unknown (the broker may hold it). The exporter config's unknown_when
// matches it.
const unknownResultPrefix = "unknown result: "

// failure is what a relay writes to a row whose publish failed.
type failure struct {
	Status    string
	RetryIn   time.Duration // 0 for abandoned rows
	LastError string
}

// decideFailure says what becomes of a row after its attempts-th publish
// attempt failed with err: back to PENDING with a backoff, or ABANDONED
// once maxAttempts were used. An unknown result (the broker may have
// accepted it) waits unknownBackoff before the retry that may duplicate it.
func decideFailure(attempts, maxAttempts int, unknown bool, unknownBackoff time.Duration, err string) failure {
	msg := trimError(err)
	if unknown {
		msg = unknownResultPrefix + msg
	}
	if attempts >= maxAttempts {
		return failure{Status: StatusAbandoned, LastError: fmt.Sprintf("gave up after %d attempts: %s", attempts, msg)}
	}
	if unknown {
		return failure{Status: StatusPending, RetryIn: unknownBackoff, LastError: msg}
	}
	return failure{Status: StatusPending, RetryIn: backoff(attempts), LastError: msg}
}

// backoff is the wait before retry number attempts+1: 1s, 2s, 4s ... up
// to 30s.
func backoff(attempts int) time.Duration {
	if attempts < 1 {
		attempts = 1
	}
	d := time.Second
	for i := 1; i < attempts && d < 30*time.Second; i++ {
		d *= 2
	}
	if d > 30*time.Second {
		d = 30 * time.Second
	}
	return d
}

// trimError keeps last_error short and on one line.
func trimError(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// event is the value of a record on the messages topic. It carries ids
// and the version only, never the message body.
type event struct {
	EventID   string `json:"event_id"`
	Type      string `json:"type"`
	MessageID int64  `json:"message_id"`
	Version   int    `json:"version"`
}

func (e event) encode() []byte {
	b, _ := json.Marshal(e)
	return b
}

func decodeEvent(b []byte) (event, error) {
	var e event
	if err := json.Unmarshal(b, &e); err != nil {
		return event{}, fmt.Errorf("decode event: %w", err)
	}
	if e.MessageID == 0 || e.Version < 1 {
		return event{}, fmt.Errorf("decode event: message_id %d version %d: not an event", e.MessageID, e.Version)
	}
	return e, nil
}

// eventType names the event of a message's version.
func eventType(version int) string {
	if version <= 1 {
		return "message.created"
	}
	return "message.edited"
}

// nextFault is the fault injected after the n-th (0-based) one.
func nextFault(n int) FaultKind {
	return FaultKinds[n%len(FaultKinds)]
}

// recentIDs is a bounded set of recently created message ids that writers
// pick edits from, minus the ids faults have frozen.
type recentIDs struct {
	ids    []int64
	next   int
	frozen map[int64]bool
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{ids: make([]int64, 0, n), frozen: map[int64]bool{}}
}

func (r *recentIDs) add(id int64) {
	if len(r.ids) < cap(r.ids) {
		r.ids = append(r.ids, id)
		return
	}
	r.ids[r.next] = id
	r.next = (r.next + 1) % len(r.ids)
}

// freeze keeps id from ever being edited again, so the trace a fault left
// on it stays.
func (r *recentIDs) freeze(id int64) { r.frozen[id] = true }

// pick returns the id at position i (taken modulo the size) that is not
// frozen, looking forward from there; false if none.
func (r *recentIDs) pick(i int) (int64, bool) {
	n := len(r.ids)
	for k := 0; k < n; k++ {
		id := r.ids[(i+k)%n]
		if !r.frozen[id] {
			return id, true
		}
	}
	return 0, false
}
