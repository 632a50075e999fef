package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes n records to topic/partition in batches of batch,
// record i timestamped base + i seconds.
func produce(t *testing.T, cl *kgo.Client, topic string, partition int32, n, batch, size int) {
	t.Helper()
	for i := 0; i < n; i += batch {
		var rs []*kgo.Record
		for j := i; j < min(i+batch, n); j++ {
			v := make([]byte, size)
			for k := range v {
				v[k] = byte(j + k) // some entropy, so compression has work
			}
			rs = append(rs, &kgo.Record{Topic: topic, Partition: partition, Value: v, Timestamp: base.Add(time.Duration(j) * time.Second)})
		}
		if err := cl.ProduceSync(testCtx(t), rs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

func metadata(t *testing.T, adm *kadm.Client, topics ...string) kadm.TopicDetails {
	t.Helper()
	m, err := adm.Metadata(testCtx(t), topics...)
	if err != nil {
		t.Fatal(err)
	}
	return m.Topics
}

// answered indexes Read's answers by want.
func answered(t *testing.T, wants []Want, probes []Probe, ok []bool) map[Want]Probe {
	t.Helper()
	if len(probes) != len(wants) || len(ok) != len(wants) {
		t.Fatalf("%d probes, %d oks for %d wants", len(probes), len(ok), len(wants))
	}
	m := map[Want]Probe{}
	for i, w := range wants {
		if ok[i] {
			m[w] = probes[i]
		}
	}
	return m
}

func checkFound(t *testing.T, got map[Want]Probe, w Want, offset int64) {
	t.Helper()
	pr, ok := got[w]
	if !ok {
		t.Fatalf("%+v not answered", w)
	}
	want := base.Add(time.Duration(offset) * time.Second)
	if !pr.Found || pr.Offset != offset || !pr.Timestamp.Equal(want) || pr.From != w.From {
		t.Fatalf("%+v = %+v; want the record at %d stamped %v", w, pr, offset, want)
	}
}

// TestReadEveryCodec reads the records at several offsets of one partition
// per compression codec, in one Fetch per broker: every asked offset gets
// its own record's timestamp.
func TestReadEveryCodec(t *testing.T) {
	kc := kafkatest.New(t, 2)
	k := &config.Kafka{Brokers: kc.Brokers()}
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	var topics []string
	var wants []Want
	for name, codec := range codecs {
		topic := "c-" + name
		topics = append(topics, topic)
		cl, adm := kafkaAdmin(t, k, kgo.ProducerBatchCompression(codec))
		if _, err := adm.CreateTopic(testCtx(t), 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		produce(t, cl, topic, 0, 50, 10, 200)
		for _, from := range []int64{0, 7, 23, 49, 50} {
			wants = append(wants, Want{Topic: topic, Partition: 0, From: from})
		}
	}
	_, adm := kafkaAdmin(t, k)
	rcl, _ := kafkaAdmin(t, k)
	p := NewProber(rcl)
	probes, ok, err := p.Read(testCtx(t), metadata(t, adm, topics...), wants)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	got := answered(t, wants, probes, ok)
	for _, w := range wants {
		if w.From == 50 {
			pr, ok := got[w]
			if !ok || pr.Found || pr.Next < 50 {
				t.Fatalf("%+v at the end = %+v, %v; want no record", w, pr, ok)
			}
			continue
		}
		checkFound(t, got, w, w.From)
	}
	if f := p.Fetches(); f > 2 {
		t.Fatalf("%d fetches for 2 brokers: not batched", f)
	}
}

// TestReadAfterRetentionAndLargeBatches: an offset deleted by retention is
// answered by the first record left; partitions whose batches exceed the
// per-partition share are read in later rounds, first in their request.
func TestReadAfterRetentionAndLargeBatches(t *testing.T) {
	kc := kafkatest.New(t, 1)
	k := &config.Kafka{Brokers: kc.Brokers()}
	cl, adm := kafkaAdmin(t, k, kgo.ProducerBatchCompression(kgo.NoCompression()))
	if _, err := adm.CreateTopic(testCtx(t), 3, 1, nil, "big"); err != nil {
		t.Fatal(err)
	}
	produce(t, cl, "big", 0, 20, 5, 10)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "big", Partition: 0, At: 12})
	if _, err := adm.DeleteRecords(testCtx(t), del); err != nil {
		t.Fatal(err)
	}
	// 3 records of 300 KiB in one batch each: larger than partitionBytes.
	produce(t, cl, "big", 1, 3, 3, 300<<10)
	produce(t, cl, "big", 2, 3, 3, 300<<10)

	rcl, _ := kafkaAdmin(t, k)
	p := NewProber(rcl)
	wants := []Want{{"big", 0, 3, false}, {"big", 0, 14, false}, {"big", 1, 1, false}, {"big", 2, 2, false}}
	probes, ok, err := p.Read(testCtx(t), metadata(t, adm, "big"), wants)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	got := answered(t, wants, probes, ok)
	checkFound(t, got, Want{"big", 0, 3, false}, 12)
	checkFound(t, got, Want{"big", 0, 14, false}, 14)
	checkFound(t, got, Want{"big", 1, 1, false}, 1)
	checkFound(t, got, Want{"big", 2, 2, false}, 2)
	t.Logf("%d fetches", p.Fetches())
}

// TestReadUnknownPartition: a want without a leader is an error, and the
// others are still answered.
func TestReadUnknownPartition(t *testing.T) {
	kc := kafkatest.New(t, 1)
	k := &config.Kafka{Brokers: kc.Brokers()}
	cl, adm := kafkaAdmin(t, k)
	if _, err := adm.CreateTopic(testCtx(t), 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	produce(t, cl, "t", 0, 5, 5, 10)
	rcl, _ := kafkaAdmin(t, k)
	p := NewProber(rcl)
	wants := []Want{{"t", 0, 2, false}, {"t", 7, 0, false}, {"missing", 0, 0, false}, {"t", 0, 2, false}}
	probes, ok, err := p.Read(testCtx(t), metadata(t, adm, "t"), wants)
	got := answered(t, wants, probes, ok)
	if !ok[3] || probes[3] != probes[0] {
		t.Fatal("a repeated want is answered too")
	}
	if err == nil {
		t.Fatal("want an error for partitions without a leader")
	}
	checkFound(t, got, Want{"t", 0, 2, false}, 2)
	if len(got) != 1 {
		t.Fatalf("answers for unknown partitions: %v", fmt.Sprint(got))
	}
}
