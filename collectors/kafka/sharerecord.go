package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Apache Kafka's share coordinator keeps each share-partition's state in
// its compacted internal topic __share_group_state and answers a share
// group's offsets from the state it rebuilt from that topic. Its records
// (Kafka 4.2 to 4.4, version 0 of each):
//
//	key:   int16 record type (0: snapshot, 1: update), group id (int16
//	       length, bytes), topic id (16 bytes), partition (int32)
//	value: int16 version, then
//	       snapshot: snapshot epoch, state epoch, leader epoch (int32
//	       each), start offset (int64), create and write time (int64
//	       each), state batches, tagged fields
//	       update:   snapshot epoch, leader epoch (int32 each), start
//	       offset (int64, -1: unchanged), state batches, tagged fields
//
// The state batches are a compact array of (first offset, last offset,
// delivery state, delivery count, tagged fields); tagged field 0 of a
// value is the delivery-complete count (int32; -1, its default, when
// unknown): the records at or after the start offset whose delivery is
// complete (acknowledged or archived).
//
// The coordinator replays them in order: a snapshot replaces the state, a
// snapshot key without value deletes it, an update creates the state when
// there is none and else moves the start offset (unless -1) and replaces
// the delivery-complete count. The broker's lag of a share-partition is
// then high watermark - start offset - delivery-complete count, unknown
// when either is -1 (shareLag).

// Record types of the share coordinator's keys.
const (
	shareSnapshotType = 0
	shareUpdateType   = 1
)

// errShareVersion is a record this reader does not know: a later Kafka
// may have changed the records, and guessing would give wrong lags.
var errShareVersion = errors.New("unknown share coordinator record version")

// shareRecord is one decoded record of __share_group_state.
type shareRecord struct {
	typ   int16
	group string
	topic [16]byte
	part  int32
	// tomb is a key without value.
	tomb  bool
	start int64
	done  int32
}

// shareReader reads the big-endian and varint fields of one record.
type shareReader struct {
	b   []byte
	err error
}

func (r *shareReader) take(n int) []byte {
	if r.err != nil || n < 0 || len(r.b) < n {
		if r.err == nil {
			r.err = errors.New("record too short")
		}
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *shareReader) int16() int16 {
	if b := r.take(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *shareReader) int32() int32 {
	if b := r.take(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *shareReader) int64() int64 {
	if b := r.take(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

func (r *shareReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// tags reads tagged fields, calling f with each (tag, data).
func (r *shareReader) tags(f func(tag uint64, data []byte)) {
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		tag := r.uvarint()
		data := r.take(int(r.uvarint()))
		if r.err == nil && f != nil {
			f(tag, data)
		}
	}
}

// batches skips the compact array of state batches.
func (r *shareReader) batches() {
	n := r.uvarint()
	for i := uint64(1); i < n && r.err == nil; i++ {
		r.take(8 + 8 + 1 + 2)
		r.tags(nil)
	}
}

// decodeShareRecord decodes one record; ok is false for a record type the
// coordinator itself skips (none other exists in Kafka 4.4).
func decodeShareRecord(key, value []byte) (rec shareRecord, ok bool, err error) {
	r := shareReader{b: key}
	rec.typ = r.int16()
	if r.err == nil && rec.typ != shareSnapshotType && rec.typ != shareUpdateType {
		return rec, false, nil
	}
	rec.group = string(r.take(int(r.int16())))
	copy(rec.topic[:], r.take(16))
	rec.part = r.int32()
	if r.err != nil {
		return rec, false, fmt.Errorf("share coordinator record key: %w", r.err)
	}
	if value == nil {
		rec.tomb = true
		return rec, true, nil
	}
	r = shareReader{b: value}
	if v := r.int16(); r.err == nil && v != 0 {
		return rec, false, fmt.Errorf("%w: value version %d of record type %d", errShareVersion, v, rec.typ)
	}
	if rec.typ == shareSnapshotType {
		r.take(4 + 4 + 4) // snapshot, state and leader epochs
		rec.start = r.int64()
		r.take(8 + 8) // create and write times
	} else {
		r.take(4 + 4) // snapshot and leader epochs
		rec.start = r.int64()
	}
	r.batches()
	rec.done = -1
	r.tags(func(tag uint64, data []byte) {
		if tag == 0 && len(data) == 4 {
			rec.done = int32(binary.BigEndian.Uint32(data))
		}
	})
	if r.err != nil {
		return rec, false, fmt.Errorf("share coordinator record value (type %d): %w", rec.typ, r.err)
	}
	return rec, true, nil
}

// shareEntry is one share-partition's state: what the broker's lag needs.
type shareEntry struct {
	// topic indexes shareStore.ids.
	topic int32
	part  int32
	start int64
	done  int32
}

// shareStore is every share-partition's state, by group, rebuilt from
// the records as the share coordinator rebuilds it. A group's entries
// stay sorted by (topic, partition): 24 bytes each, no map per group.
type shareStore struct {
	// keep selects the groups whose state is kept; nil: all.
	keep   func(string) bool
	ids    [][16]byte
	idIdx  map[[16]byte]int32
	groups map[string][]shareEntry
}

func newShareStore() *shareStore {
	return &shareStore{idIdx: map[[16]byte]int32{}, groups: map[string][]shareEntry{}}
}

func (s *shareStore) topicIdx(id [16]byte) int32 {
	i, ok := s.idIdx[id]
	if !ok {
		i = int32(len(s.ids))
		s.ids = append(s.ids, id)
		s.idIdx[id] = i
	}
	return i
}

// apply replays one record.
func (s *shareStore) apply(rec shareRecord) {
	if rec.tomb && rec.typ == shareUpdateType {
		// The coordinator writes no such record (its replay would
		// fail on it); leave the state as it is.
		return
	}
	if s.keep != nil && !s.keep(rec.group) {
		return
	}
	es := s.groups[rec.group]
	e := shareEntry{topic: s.topicIdx(rec.topic), part: rec.part}
	i, found := slices.BinarySearchFunc(es, e, cmpShareEntry)
	switch {
	case rec.tomb:
		if found {
			es = slices.Delete(es, i, i+1)
			if len(es) == 0 {
				delete(s.groups, rec.group)
				return
			}
			s.groups[rec.group] = es
		}
		return
	case found && rec.typ == shareUpdateType:
		if rec.start != -1 {
			es[i].start = rec.start
		}
		es[i].done = rec.done
		return
	case found:
		es[i].start, es[i].done = rec.start, rec.done
		return
	}
	e.start, e.done = rec.start, rec.done
	s.groups[rec.group] = slices.Insert(es, i, e)
}

func cmpShareEntry(a, b shareEntry) int {
	if a.topic != b.topic {
		return int(a.topic - b.topic)
	}
	return int(a.part - b.part)
}

// shareLag is the broker's lag of a share-partition at high watermark
// end; ok is false where the broker answers -1 (no start offset yet, or
// no delivery-complete count).
func shareLag(e shareEntry, end int64) (lag int64, ok bool) {
	if e.start == -1 || e.done == -1 {
		return 0, false
	}
	return end - e.start - int64(e.done), true
}
