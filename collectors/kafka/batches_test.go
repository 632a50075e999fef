package kafka

import (
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type rec struct {
	offsetDelta int32
	timeDelta   int64
	key         []byte
}

// encodeBatch builds a magic-2 record batch as a broker stores it.
func encodeBatch(first int64, attrs int16, pid int64, firstTime, maxTime int64, recs ...rec) []byte {
	var records []byte
	for _, r := range recs {
		kr := kmsg.Record{TimestampDelta64: r.timeDelta, OffsetDelta: r.offsetDelta, Key: r.key, Value: []byte("v")}
		body := kr.AppendTo(nil)[1:] // drop the zero length varint
		records = binary.AppendVarint(records, int64(len(body)))
		records = append(records, body...)
	}
	b := kmsg.RecordBatch{
		FirstOffset:     first,
		Magic:           2,
		Attributes:      attrs,
		LastOffsetDelta: recs[len(recs)-1].offsetDelta,
		FirstTimestamp:  firstTime,
		MaxTimestamp:    maxTime,
		ProducerID:      pid,
		ProducerEpoch:   0,
		FirstSequence:   0,
		NumRecords:      int32(len(recs)),
		Records:         records,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	return out
}

func marker(first int64, pid int64, abort bool) []byte {
	typ := []byte{0, 0, 0, 1} // version 0, type 1: commit
	if abort {
		typ = []byte{0, 0, 0, 0}
	}
	return encodeBatch(first, attrTxn|attrControl, pid, 0, 0, rec{key: typ})
}

type hit struct {
	ask, offset, millis int64
}

func runScan(t *testing.T, rp *kmsg.FetchResponseTopicPartition, cursor int64, offs ...int64) ([]hit, int, int64) {
	t.Helper()
	var asks []ask
	for i, o := range offs {
		asks = append(asks, ask{off: o, idx: i})
	}
	var hits []hit
	n, next, err := scan(rp, cursor, asks, func(a ask, offset, millis int64) {
		hits = append(hits, hit{a.off, offset, millis})
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return hits, n, next
}

// catBatches lays record batches one after the other, as a fetch answer
// holds them.
func catBatches(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// scanCase is one fetch answer scanned from cursor for asks, with the
// hits, the count answered and the next offset to read that it must give.
type scanCase struct {
	name     string
	rp       kmsg.FetchResponseTopicPartition
	cursor   int64
	asks     []int64
	hits     []hit
	answered int
	next     int64
}

// scanCases are the fetch answers of TestScan.
func scanCases() []scanCase {
	return []scanCase{
		{
			name:   "compacted batch: an asked offset with no record takes the next",
			rp:     kmsg.FetchResponseTopicPartition{RecordBatches: encodeBatch(10, 0, -1, 1000, 1500, rec{0, 0, nil}, rec{2, 200, nil}, rec{5, 500, nil})},
			cursor: 10, asks: []int64{10, 11, 13},
			hits:     []hit{{10, 10, 1000}, {11, 12, 1200}, {13, 15, 1500}},
			answered: 3, next: 16,
		},
		{
			name:   "a read starting inside a batch skips the records before the cursor",
			rp:     kmsg.FetchResponseTopicPartition{RecordBatches: encodeBatch(0, 0, -1, 1000, 1400, rec{0, 0, nil}, rec{1, 100, nil}, rec{2, 200, nil}, rec{3, 300, nil}, rec{4, 400, nil})},
			cursor: 3, asks: []int64{3},
			hits:     []hit{{3, 3, 1300}},
			answered: 1, next: 5,
		},
		{
			name:   "log append time: the batch's max timestamp",
			rp:     kmsg.FetchResponseTopicPartition{RecordBatches: encodeBatch(0, attrLogAppend, -1, 1000, 9000, rec{0, 0, nil}, rec{1, 5, nil})},
			cursor: 0, asks: []int64{1},
			hits:     []hit{{1, 1, 9000}},
			answered: 1, next: 2,
		},
		{
			name: "aborted records and markers are not data; a commit marker does not end an abort",
			rp: kmsg.FetchResponseTopicPartition{
				RecordBatches: catBatches(
					encodeBatch(0, attrTxn, 7, 100, 100, rec{0, 0, nil}, rec{1, 0, nil}), // committed txn
					marker(2, 7, false),
					encodeBatch(3, attrTxn, 7, 300, 300, rec{0, 0, nil}, rec{1, 0, nil}), // aborted txn
					marker(5, 7, true),
					encodeBatch(6, 0, -1, 600, 600, rec{0, 0, nil}),
				),
				AbortedTransactions: []kmsg.FetchResponseTopicPartitionAbortedTransaction{{ProducerID: 7, FirstOffset: 3}},
			},
			cursor: 0, asks: []int64{0, 2, 3, 5},
			hits:     []hit{{0, 0, 100}, {2, 6, 600}, {3, 6, 600}, {5, 6, 600}},
			answered: 4, next: 7,
		},
		{
			name:   "only markers: nothing answered, read up to the end",
			rp:     kmsg.FetchResponseTopicPartition{RecordBatches: marker(5, 7, false)},
			cursor: 5, asks: []int64{5},
			answered: 0, next: 6,
		},
		{
			name: "a batch cut short by the size limit is not read",
			rp: kmsg.FetchResponseTopicPartition{RecordBatches: catBatches(
				encodeBatch(0, 0, -1, 100, 100, rec{0, 0, nil}),
				encodeBatch(1, 0, -1, 200, 200, rec{0, 0, nil})[:30],
			)},
			cursor: 0, asks: []int64{0, 1},
			hits:     []hit{{0, 0, 100}},
			answered: 1, next: 1,
		},
	}
}

func TestScan(t *testing.T) {
	for _, tc := range scanCases() {
		t.Run(tc.name, func(t *testing.T) {
			hits, n, next := runScan(t, &tc.rp, tc.cursor, tc.asks...)
			if n != tc.answered || next != tc.next || len(hits) != len(tc.hits) {
				t.Fatalf("answered %d, next %d, hits %v; want %d, %d, %v", n, next, hits, tc.answered, tc.next, tc.hits)
			}
			for i := range hits {
				if hits[i] != tc.hits[i] {
					t.Fatalf("hits %v; want %v", hits, tc.hits)
				}
			}
		})
	}
}

func TestScanRejectsOldFormats(t *testing.T) {
	b := encodeBatch(0, 0, -1, 0, 0, rec{0, 0, nil})
	b[offMagic] = 1
	_, _, err := scan(&kmsg.FetchResponseTopicPartition{RecordBatches: b}, 0, []ask{{0, 0}}, func(ask, int64, int64) {})
	if err == nil {
		t.Fatal("message format v1 must be an error, not a wrong answer")
	}
}
