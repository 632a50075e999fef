package audit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// Order inversions as consumers saw them: the records of one aggregate
// on one partition, in offset order, with a lower sequence after a higher
// one. Two relays that each claim one of an aggregate's events (E9 and
// E10) publish them in whichever order their transactions finish; E10
// reaching the broker before E9 is one inversion when E9 arrives. A gap (9 then 11) is not one, and a
// repeat of the highest sequence (a duplicate publish) is not one either:
// outbox_audit_duplicates_total sees those.
//
// Every record is read, not only sampled ids: an aggregate's order is
// judged on all its records. Memory is one entry per (topic, partition,
// aggregate) seen in the window: a 64-bit hash of the three and the
// highest sequence with its offset and time, about 64 bytes with the
// map's overhead, and at most MaxOrderAggregates entries (about 64 MiB);
// past the cap new aggregates are not judged until older ones leave the
// window (OrderUntracked counts their records). An entry leaves when its
// aggregate has had no record for one window. A hash collision of two
// aggregates can report a false inversion with odds of about n²/2⁶⁴.
//
// As for duplicates, the window re-read after a restart rebuilds the
// entries but its inversions (records older than the start) are only
// listed, not counted again.
//
// An aggregate whose sequence restarts (deleted and created again under
// the same id, counting from 1) within one window of its last record
// counts each new record below the old highest sequence as an
// inversion; once a window has passed without a record of it, it starts
// afresh. TestOrderSequenceRestart shows both.

// MaxOrderAggregates bounds the aggregates the order check remembers.
const MaxOrderAggregates = 1 << 20

// MaxInversions is how many of the last inversions the report lists.
const MaxInversions = 100

var auditInversionsDesc = prometheus.NewDesc(
	vocab.AuditOrderInversions,
	"Records of one aggregate seen on a partition with a lower sequence after a higher one, counted from the exporter's start: a consumer applying them in arrival order applied an older event after a newer one. /api/v1/audit?outbox= lists the last ones.",
	[]string{vocab.LabelOutbox}, nil)

// Inversion is one record that arrived after a higher sequence of its
// aggregate on its partition.
type Inversion struct {
	Aggregate string `json:"aggregate"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Sequence and Offset are the late record's; After and AfterOffset
	// the higher sequence it came after.
	Sequence    int64     `json:"sequence"`
	Offset      int64     `json:"offset"`
	After       int64     `json:"after_sequence"`
	AfterOffset int64     `json:"after_offset"`
	At          time.Time `json:"at"`
	// Reread: older than the auditor's start, so not counted.
	Reread bool `json:"reread,omitempty"`
}

type orderEntry struct {
	seq, offset, ts int64
}

// orderTracker judges the order of the records the tailer reads. Its
// own lock: the tailer calls observe for every record, the collector and
// the report read.
type orderTracker struct {
	agg, seq Field
	span     int64 // window in milliseconds
	limit    int   // MaxOrderAggregates; smaller in tests
	seed     maphash.Seed

	mu         sync.Mutex
	last       map[uint64]orderEntry
	newest     int64
	sinceSweep int
	inversions uint64
	untracked  uint64
	bad        uint64
	recent     []Inversion // ring of the last MaxInversions
	next       int
}

// newOrderTracker returns the tracker of an audit, or nil when it has no
// aggregate and sequence.
func newOrderTracker(a *config.Audit) (*orderTracker, error) {
	if a.Aggregate == "" || a.Sequence == "" {
		return nil, nil
	}
	agg, err := ParseField(a.Aggregate)
	if err != nil {
		return nil, fmt.Errorf("aggregate: %w", err)
	}
	seq, err := ParseField(a.Sequence)
	if err != nil {
		return nil, fmt.Errorf("sequence: %w", err)
	}
	return &orderTracker{agg: agg, seq: seq, span: a.Window.Milliseconds(), limit: MaxOrderAggregates, seed: maphash.MakeSeed(),
		last: map[uint64]orderEntry{}}, nil
}

// observe judges one record; start is the auditor's start in Unix
// milliseconds. A nil tracker does nothing.
func (t *orderTracker) observe(r *kgo.Record, start int64) {
	if t == nil {
		return
	}
	agg, err := t.agg.Get(r)
	if err != nil {
		t.note(func() { t.bad++ })
		return
	}
	seqText, err := t.seq.Get(r)
	if err != nil {
		t.note(func() { t.bad++ })
		return
	}
	seq, err := strconv.ParseInt(string(seqText), 10, 64)
	if err != nil {
		t.note(func() { t.bad++ })
		return
	}
	var h maphash.Hash
	h.SetSeed(t.seed)
	_, _ = h.WriteString(r.Topic)
	_, _ = h.WriteString("\x00" + strconv.Itoa(int(r.Partition)) + "\x00")
	_, _ = h.Write(agg)
	key := h.Sum64()
	ts := r.Timestamp.UnixMilli()

	t.mu.Lock()
	defer t.mu.Unlock()
	t.newest = max(t.newest, ts)
	prev, ok := t.last[key]
	if ok && prev.ts < t.newest-t.span {
		// Out of the window, not swept yet: forgotten, as if swept.
		ok = false
	}
	switch {
	case !ok:
		if len(t.last) >= t.limit {
			t.sweep()
			if len(t.last) >= t.limit {
				t.untracked++
				return
			}
		}
		t.last[key] = orderEntry{seq: seq, offset: r.Offset, ts: ts}
	case seq > prev.seq:
		t.last[key] = orderEntry{seq: seq, offset: r.Offset, ts: ts}
	case seq < prev.seq:
		inv := Inversion{Aggregate: strings.ToValidUTF8(string(agg), "\uFFFD"), Topic: r.Topic, Partition: r.Partition,
			Sequence: seq, Offset: r.Offset, After: prev.seq, AfterOffset: prev.offset,
			At: r.Timestamp.UTC(), Reread: ts < start}
		if !inv.Reread {
			t.inversions++
		}
		t.remember(inv)
		// The entry keeps the highest sequence: a later record below it
		// is late too. Its time moves on, so it stays in the window.
		prev.ts = max(prev.ts, ts)
		t.last[key] = prev
	default:
		prev.ts = max(prev.ts, ts)
		t.last[key] = prev
	}
	if t.sinceSweep++; t.sinceSweep >= 1<<16 {
		t.sweep()
	}
}

func (t *orderTracker) note(f func()) {
	t.mu.Lock()
	f()
	t.mu.Unlock()
}

// sweep forgets aggregates with no record for one window. Call with mu
// held.
func (t *orderTracker) sweep() {
	t.sinceSweep = 0
	horizon := t.newest - t.span
	for k, e := range t.last {
		if e.ts < horizon {
			delete(t.last, k)
		}
	}
}

func (t *orderTracker) remember(inv Inversion) {
	if len(t.recent) < MaxInversions {
		t.recent = append(t.recent, inv)
		return
	}
	t.recent[t.next] = inv
	t.next = (t.next + 1) % MaxInversions
}

// OrderStats is what the order check found so far.
type OrderStats struct {
	Inversions uint64
	// Aggregates are the entries held; Untracked the records of
	// aggregates not judged because MaxOrderAggregates was reached;
	// Unreadable the records without a readable aggregate or integer
	// sequence.
	Aggregates, Untracked, Unreadable uint64
	// Last are the last inversions, oldest first.
	Last []Inversion
}

func (t *orderTracker) stats() OrderStats {
	if t == nil {
		return OrderStats{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := OrderStats{Inversions: t.inversions, Aggregates: uint64(len(t.last)), Untracked: t.untracked, Unreadable: t.bad}
	s.Last = append(append([]Inversion{}, t.recent[t.next:]...), t.recent[:t.next]...)
	return s
}

// OrderStats returns the order check's counts; zero without aggregate
// and sequence.
func (a *Auditor) OrderStats() OrderStats { return a.order.stats() }

// orderMetrics are the order metrics of the audit, none without
// aggregate and sequence.
func (a *Auditor) orderMetrics() []prometheus.Metric {
	if a.order == nil {
		return nil
	}
	return []prometheus.Metric{prometheus.MustNewConstMetric(auditInversionsDesc, prometheus.CounterValue,
		float64(a.order.stats().Inversions), a.name)}
}

// Field reads a value from a record: "key", "header:NAME" or
// "json:PATH", where PATH may be dotted to reach into nested objects
// (json:payload.after.seq for a Debezium envelope). The last step must be
// a string or a number.
type Field struct {
	top  Extractor
	path []string
}

// ParseField parses an aggregate or sequence setting.
func ParseField(spec string) (Field, error) {
	if rest, ok := strings.CutPrefix(spec, "json:"); ok && strings.Contains(rest, ".") {
		parts := strings.Split(rest, ".")
		for _, p := range parts {
			if p == "" {
				return Field{}, fmt.Errorf("%q has an empty step in its JSON path", spec)
			}
		}
		return Field{top: Extractor{source: fromJSON, name: parts[len(parts)-1]}, path: parts[:len(parts)-1]}, nil
	}
	e, err := ParseEventID(spec)
	if err != nil {
		return Field{}, fmt.Errorf("%q is not key, header:NAME or json:PATH", spec)
	}
	return Field{top: e}, nil
}

// Get returns the field's value in r; the slice may alias the record.
func (f Field) Get(r *kgo.Record) ([]byte, error) {
	if len(f.path) == 0 {
		return f.top.ID(r)
	}
	v := r.Value
	for _, step := range f.path {
		var err error
		if v, err = rawField(v, step); err != nil {
			return nil, err
		}
	}
	id, err := jsonField(v, f.top.name)
	if err != nil {
		return nil, err
	}
	if len(id) == 0 {
		return nil, ErrEmptyID
	}
	return id, nil
}

// errNotObject: a step of a JSON path is not an object.
var errNotObject = errors.New("JSON path step is not an object")

// rawField returns the raw JSON value of a top-level field of object v.
func rawField(v []byte, field string) ([]byte, error) {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return nil, ErrBadJSON
	}
	for i++; ; {
		i = skipSpace(v, i)
		if i >= len(v) || v[i] == '}' {
			return nil, ErrNoField
		}
		if v[i] != '"' {
			return nil, ErrBadJSON
		}
		end, escaped, ok := scanString(v, i)
		if !ok {
			return nil, ErrBadJSON
		}
		match := keyEquals(v[i:end], escaped, field)
		if i = skipSpace(v, end); i >= len(v) || v[i] != ':' {
			return nil, ErrBadJSON
		}
		if i = skipSpace(v, i+1); i >= len(v) {
			return nil, ErrBadJSON
		}
		vend, ok := skipValue(v, i)
		if !ok {
			return nil, ErrBadJSON
		}
		if match {
			if v[i] != '{' {
				return nil, errNotObject
			}
			return v[i:vend], nil
		}
		if i = skipSpace(v, vend); i < len(v) && v[i] == ',' {
			i++
		}
	}
}
