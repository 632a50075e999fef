package kafka

import (
	"encoding/binary"
	"errors"
	"testing"
)

// shareKey encodes a share coordinator record key of type typ.
func shareKey(typ int16, group string, topic byte, part int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(typ))
	b = binary.BigEndian.AppendUint16(b, uint16(len(group)))
	b = append(b, group...)
	id := [16]byte{15: topic}
	b = append(b, id[:]...)
	return binary.BigEndian.AppendUint32(b, uint32(part))
}

// shareValue encodes a version 0 value of type typ: the start offset,
// two state batches (the second with a tagged field of its own), an
// unknown tagged field, and the delivery-complete count (tag 0) unless
// done is nil.
func shareValue(typ int16, start int64, done *int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	if typ == shareSnapshotType {
		b = binary.BigEndian.AppendUint32(b, 1) // snapshot epoch
		b = binary.BigEndian.AppendUint32(b, 2) // state epoch
		b = binary.BigEndian.AppendUint32(b, 3) // leader epoch
		b = binary.BigEndian.AppendUint64(b, uint64(start))
		b = binary.BigEndian.AppendUint64(b, 1000) // create time
		b = binary.BigEndian.AppendUint64(b, 2000) // write time
	} else {
		b = binary.BigEndian.AppendUint32(b, 1) // snapshot epoch
		b = binary.BigEndian.AppendUint32(b, 3) // leader epoch
		b = binary.BigEndian.AppendUint64(b, uint64(start))
	}
	b = binary.AppendUvarint(b, 3) // two batches
	for i, tagged := range []bool{false, true} {
		b = binary.BigEndian.AppendUint64(b, uint64(start+int64(10*i)))
		b = binary.BigEndian.AppendUint64(b, uint64(start+int64(10*i+4)))
		b = append(b, 2)                        // acknowledged
		b = binary.BigEndian.AppendUint16(b, 1) // delivery count
		if tagged {
			b = append(b, 1, 7, 2, 0xAA, 0xBB) // one field, tag 7, 2 bytes
		} else {
			b = append(b, 0)
		}
	}
	n := 1
	if done != nil {
		n = 2
	}
	b = binary.AppendUvarint(b, uint64(n))
	if done != nil {
		b = append(b, 0, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(*done))
	}
	return append(b, 9, 1, 0x01) // tag 9, one byte
}

func i32(v int32) *int32 { return &v }

// The share coordinator's records replay as the coordinator replays them:
// a snapshot replaces the state, an update moves the start offset unless
// it is -1 and replaces the delivery-complete count (its default -1 when
// the record has none), an update alone makes a state, a snapshot key
// without value deletes it; the lag is high watermark - start offset -
// delivery-complete count, unknown where either is -1.
func TestShareRecordsReplay(t *testing.T) {
	s := newShareStore()
	apply := func(key, value []byte) {
		t.Helper()
		rec, ok, err := decodeShareRecord(key, value)
		if err != nil || !ok {
			t.Fatalf("decode: ok %v, err %v", ok, err)
		}
		s.apply(rec)
	}
	want := func(group string, topic byte, part int32, lag int64, lagOK bool) {
		t.Helper()
		for _, e := range s.groups[group] {
			if s.ids[e.topic] == [16]byte{15: topic} && e.part == part {
				got, ok := shareLag(e, 100)
				if ok != lagOK || (ok && got != lag) {
					t.Fatalf("%s %d/%d: lag %d (%v), want %d (%v); entry %+v", group, topic, part, got, ok, lag, lagOK, e)
				}
				return
			}
		}
		t.Fatalf("%s %d/%d: no state", group, topic, part)
	}
	apply(shareKey(0, "q", 1, 0), shareValue(0, 40, i32(5)))
	want("q", 1, 0, 55, true)
	apply(shareKey(1, "q", 1, 0), shareValue(1, -1, i32(9)))
	want("q", 1, 0, 51, true)
	apply(shareKey(1, "q", 1, 0), shareValue(1, 70, i32(0)))
	want("q", 1, 0, 30, true)
	apply(shareKey(1, "q", 1, 0), shareValue(1, 80, nil))
	want("q", 1, 0, 0, false)
	apply(shareKey(0, "q", 1, 0), shareValue(0, -1, i32(-1)))
	want("q", 1, 0, 0, false)
	apply(shareKey(1, "q", 2, 3), shareValue(1, 10, i32(2)))
	want("q", 2, 3, 88, true)
	apply(shareKey(0, "q", 1, 1), shareValue(0, 0, i32(0)))
	want("q", 1, 1, 100, true)
	if es := s.groups["q"]; len(es) != 3 || cmpShareEntry(es[0], es[1]) >= 0 || cmpShareEntry(es[1], es[2]) >= 0 {
		t.Fatalf("entries not sorted by topic and partition: %+v", es)
	}
	apply(shareKey(0, "q", 1, 0), nil)
	apply(shareKey(0, "q", 1, 1), nil)
	apply(shareKey(0, "q", 2, 3), nil)
	if _, ok := s.groups["q"]; ok {
		t.Fatalf("deleted states left: %+v", s.groups["q"])
	}
}

// A record type the coordinator does not know is skipped, as it skips
// it; a value version this reader does not know, or a cut record, is an
// error: the lag would be guessed.
func TestShareRecordsUnknown(t *testing.T) {
	if _, ok, err := decodeShareRecord(shareKey(5, "q", 1, 0), []byte{0, 0}); ok || err != nil {
		t.Fatalf("record type 5: ok %v, err %v; want skipped", ok, err)
	}
	v := shareValue(0, 40, i32(5))
	v[1] = 1
	if _, _, err := decodeShareRecord(shareKey(0, "q", 1, 0), v); !errors.Is(err, errShareVersion) {
		t.Fatalf("value version 1: %v", err)
	}
	full := shareValue(1, 40, i32(5))
	for _, cut := range []int{1, 5, 20, len(full) - 3} {
		if _, _, err := decodeShareRecord(shareKey(1, "q", 1, 0), full[:cut]); err == nil {
			t.Fatalf("value cut at %d of %d: no error", cut, len(full))
		}
	}
	if _, _, err := decodeShareRecord(shareKey(0, "q", 1, 0)[:10], nil); err == nil {
		t.Fatal("key cut: no error")
	}
}
