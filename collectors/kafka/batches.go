package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A record batch (magic 2) header, as laid out on the wire.
const (
	batchHeaderLen  = 61
	offMagic        = 16
	offAttributes   = 21
	offLastDelta    = 23
	offFirstTime    = 27
	offMaxTime      = 35
	offProducerID   = 43
	offNumRecords   = 57
	attrCompression = 0x07
	attrLogAppend   = 0x08
	attrTxn         = 0x10
	attrControl     = 0x20
)

// decompressBuffers lends the buffers batches are decompressed into: a
// probe needs a batch's records only while it scans them.
type decompressBuffers struct{ p sync.Pool }

func (b *decompressBuffers) GetDecompressBytes(compressed []byte, _ kgo.CompressionCodecType) []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return (*v)[:0]
	}
	return make([]byte, 0, 8*len(compressed))
}

func (b *decompressBuffers) PutDecompressBytes(s []byte) { b.p.Put(&s) }

var (
	buffers      = &decompressBuffers{}
	decompressor = kgo.DefaultDecompressor(buffers)
)

// scan walks one fetched partition's record batches from cursor and calls
// found(ask, offset, timestamp) for each asked offset with the first data
// record at or after it: asks are sorted and answered in order, and
// answered is how many were. next is the offset after the last batch read.
//
// Control batches (markers) hold no data, nor, for a read_committed
// read, do batches of the aborted transactions the answer lists (a
// read_uncommitted answer lists none: aborted records are data to it). Only the few header
// fields needed are read, and a batch's records are decoded only when an
// asked offset falls in it, with no allocation per record: probing a
// partition costs about what it costs the broker to send it.
func scan(rp *kmsg.FetchResponseTopicPartition, cursor int64, asks []ask, found func(a ask, offset, millis int64)) (answered int, next int64, err error) {
	next = cursor
	aborted := abortedByProducer(rp.AbortedTransactions)
	var decodeErr error
	in := rp.RecordBatches
	for len(in) >= batchHeaderLen {
		first := int64(binary.BigEndian.Uint64(in))
		length := int64(int32(binary.BigEndian.Uint32(in[8:])))
		if length < 0 || int64(len(in)) < 12+length {
			break // a batch cut short by the size limit
		}
		batch := in[:12+length]
		in = in[12+length:]
		if magic := batch[offMagic]; magic != 2 {
			return answered, next, fmt.Errorf("message format v%d: time lag needs record batches (Kafka 0.11+)", magic)
		}
		if len(batch) < batchHeaderLen {
			return answered, next, errors.New("short record batch")
		}
		attrs := int16(binary.BigEndian.Uint16(batch[offAttributes:]))
		last := first + int64(int32(binary.BigEndian.Uint32(batch[offLastDelta:])))
		if last < next {
			continue
		}
		pid := int64(binary.BigEndian.Uint64(batch[offProducerID:]))
		switch {
		case attrs&attrControl != 0:
			if attrs&attrTxn != 0 && len(aborted[pid]) > 0 {
				abort, err := withRecords(batch, attrs, isAbortMarker)
				if err != nil {
					return answered, next, err
				}
				if abort {
					aborted[pid] = aborted[pid][1:]
				}
			}
		case attrs&attrTxn != 0 && len(aborted[pid]) > 0 && first >= aborted[pid][0]:
			// An aborted transaction's records.
		case answered < len(asks) && asks[answered].off <= last:
			// Only now are the records decoded: an asked offset is here.
			firstTime := int64(binary.BigEndian.Uint64(batch[offFirstTime:]))
			maxTime := int64(binary.BigEndian.Uint64(batch[offMaxTime:]))
			n := int(int32(binary.BigEndian.Uint32(batch[offNumRecords:])))
			_, err := withRecords(batch, attrs, func(records []byte) bool {
				err := eachRecord(records, n, func(offsetDelta int64, timeDelta int64) bool {
					offset := first + offsetDelta
					if offset < next {
						return true
					}
					ts := firstTime + timeDelta
					if attrs&attrLogAppend != 0 {
						ts = maxTime
					}
					for answered < len(asks) && asks[answered].off <= offset {
						found(asks[answered], offset, ts)
						answered++
					}
					// Stop once no asked offset is left in this batch.
					return answered < len(asks) && asks[answered].off <= last
				})
				if err != nil {
					decodeErr = err
				}
				return false
			})
			if err == nil {
				err = decodeErr
			}
			if err != nil {
				return answered, next, err
			}
		}
		next = last + 1
	}
	return answered, next, nil
}

// withRecords calls fn with a batch's records, decompressed into a lent
// buffer that is returned afterwards.
func withRecords(batch []byte, attrs int16, fn func([]byte) bool) (bool, error) {
	raw := batch[batchHeaderLen:]
	codec := kgo.CompressionCodecType(attrs & attrCompression)
	if codec == kgo.CodecNone {
		return fn(raw), nil
	}
	out, err := decompressor.Decompress(raw, codec)
	if err != nil {
		return false, fmt.Errorf("decompress record batch: %w", err)
	}
	r := fn(out)
	buffers.PutDecompressBytes(out)
	return r, nil
}

// eachRecord calls fn with the offset and timestamp deltas of the first n
// records in recs, until fn returns false.
func eachRecord(recs []byte, n int, fn func(offsetDelta, timeDelta int64) bool) error {
	for i := 0; i < n; i++ {
		length, k := binary.Varint(recs)
		if k <= 0 || length < 0 || int64(len(recs)-k) < length {
			return errors.New("corrupt record length")
		}
		body := recs[k : k+int(length)]
		recs = recs[k+int(length):]
		if len(body) < 1 {
			return errors.New("empty record")
		}
		body = body[1:] // attributes
		timeDelta, k := binary.Varint(body)
		if k <= 0 {
			return errors.New("corrupt record timestamp")
		}
		offsetDelta, k2 := binary.Varint(body[k:])
		if k2 <= 0 {
			return errors.New("corrupt record offset")
		}
		if !fn(offsetDelta, timeDelta) {
			return nil
		}
	}
	return nil
}

// isAbortMarker reports whether a control batch's record is an abort
// marker: its key is version int16, type int16, and type 0 is abort.
func isAbortMarker(recs []byte) bool {
	length, k := binary.Varint(recs)
	if k <= 0 || length <= 0 || int64(len(recs)-k) < length {
		return false
	}
	body := recs[k+1 : k+int(length)] // past attributes
	for range 2 {                     // timestamp and offset deltas
		_, n := binary.Varint(body)
		if n <= 0 {
			return false
		}
		body = body[n:]
	}
	keyLen, n := binary.Varint(body)
	if n <= 0 || keyLen < 4 || int64(len(body)-n) < keyLen {
		return false
	}
	key := body[n:]
	return binary.BigEndian.Uint16(key[2:]) == 0
}

// abortedByProducer indexes a fetch answer's aborted transactions by
// producer, first offsets ascending (a broker need not send them sorted).
func abortedByProducer(ats []kmsg.FetchResponseTopicPartitionAbortedTransaction) map[int64][]int64 {
	if len(ats) == 0 {
		return nil
	}
	m := map[int64][]int64{}
	for _, a := range ats {
		m[a.ProducerID] = append(m[a.ProducerID], a.FirstOffset)
	}
	for pid := range m {
		slices.Sort(m[pid])
	}
	return m
}
