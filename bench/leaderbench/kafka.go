package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// The audited topic and the consumer group whose lag every replica
// reads for its scrapes.
const (
	auditTopic = "messages"
	lagGroup   = "search-indexer"
)

// kafkaPipeline is the steady pipeline's Apache Kafka side: one broker
// with JMX on a loopback port, the topic carrying a record for each
// published outbox row (its event id in a header), and a consumer group
// that has read them all.
type kafkaPipeline struct {
	b   *kafkatest.Broker
	jmx string
}

// startKafka starts the broker and fills the topic with rows records,
// in 3 partitions, dated an hour ago as the outbox rows' published_at.
func startKafka(ctx context.Context, rows int) (*kafkaPipeline, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	b, err := kafkatest.Start(kafkatest.Options{JVM: []string{
		"-Dcom.sun.management.jmxremote", "-Dcom.sun.management.jmxremote.port=" + port,
		"-Dcom.sun.management.jmxremote.rmi.port=" + port, "-Dcom.sun.management.jmxremote.host=127.0.0.1",
		"-Djava.rmi.server.hostname=127.0.0.1", "-Dcom.sun.management.jmxremote.authenticate=false",
		"-Dcom.sun.management.jmxremote.ssl=false"}})
	if err != nil {
		return nil, err
	}
	k := &kafkaPipeline{b: b, jmx: "service:jmx:rmi:///jndi/rmi://127.0.0.1:" + port + "/jmxrmi"}
	if err := k.fill(ctx, rows); err != nil {
		b.Stop()
		return nil, err
	}
	return k, nil
}

func (k *kafkaPipeline) fill(ctx context.Context, rows int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.b.Brokers()...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, auditTopic); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	at := time.Now().Add(-time.Hour)
	for from := 1; from <= rows; from += 10000 {
		var recs []*kgo.Record
		for id := from; id < from+10000 && id <= rows; id++ {
			recs = append(recs, &kgo.Record{Topic: auditTopic, Key: []byte(strconv.Itoa(id)), Value: []byte(`{"v":1}`),
				Timestamp: at, Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(strconv.Itoa(id))}}})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, auditTopic)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	if _, err := adm.CommitOffsets(ctx, lagGroup, ends.Offsets()); err != nil {
		return fmt.Errorf("commit the group's offsets: %w", err)
	}
	return nil
}

func (k *kafkaPipeline) stop() { k.b.Stop() }

// config is the kafka and audit sections of the exporters' config.
func (k *kafkaPipeline) config() string {
	return fmt.Sprintf(`kafka:
  main:
    brokers: [%s]
    groups: [%s]
audit:
  messages:
    kafka: main
    topics: [%s]
    event_id: header:event_id
    window: 2h
    grace: 1m
    interval: 30s
`, strings.Join(k.b.Brokers(), ", "), lagGroup, auditTopic)
}

// brokerWork is the broker's own count of what clients asked of it.
type brokerWork struct {
	// topicBytes and topicFetches: bytes the broker served from the
	// audited topic, and the fetch requests naming it.
	topicBytes, topicFetches int64
	// bytesOut and requests: everything the client listener sent and
	// the requests it answered (metadata, offsets, fetches, all kinds).
	bytesOut, requests int64
	// cpuNanos: the broker process's CPU time (its JVM's
	// ProcessCpuTime), everything it did in the arm, its own background
	// work (the controller, the log cleaner) and the JMX reads included.
	cpuNanos int64
	// localMicros: the time the broker's request handlers spent on the
	// requests (RequestMetrics' LocalTimeMs, count × mean, summed over the
	// request kinds): their own processing, without the time a request
	// queued or waited in purgatory (a fetch's long poll) or its answer
	// took to send.
	localMicros int64
}

// minus is w's counters less before's: what the broker did between.
func (w brokerWork) minus(before brokerWork) brokerWork {
	return brokerWork{topicBytes: w.topicBytes - before.topicBytes, topicFetches: w.topicFetches - before.topicFetches,
		bytesOut: w.bytesOut - before.bytesOut, requests: w.requests - before.requests,
		cpuNanos: w.cpuNanos - before.cpuNanos, localMicros: w.localMicros - before.localMicros}
}

// counters reads the broker's counters through JMX with Kafka's own
// JmxTool.
func (k *kafkaPipeline) counters(ctx context.Context) (brokerWork, error) {
	names := []string{
		"kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=" + auditTopic,
		"kafka.server:type=BrokerTopicMetrics,name=TotalFetchRequestsPerSec,topic=" + auditTopic,
		"kafka.server:type=socket-server-metrics,listener=PLAINTEXT,networkProcessor=*",
		"java.lang:type=OperatingSystem",
		"kafka.network:type=RequestMetrics,name=LocalTimeMs,request=*",
	}
	args := []string{"--jmx-url", k.jmx, "--one-time", "true", "--report-format", "properties"}
	for _, n := range names {
		args = append(args, "--object-name", n)
	}
	out, err := k.b.RunTool(ctx, "org.apache.kafka.tools.JmxTool", args...)
	if err != nil {
		return brokerWork{}, err
	}
	return parseJMX(out)
}

// parseJMX sums JmxTool's properties output (name:attribute=value per
// line) into brokerWork.
func parseJMX(out string) (brokerWork, error) {
	var w brokerWork
	seen := 0
	// LocalTimeMs's count and mean, by request kind.
	local := map[string][2]float64{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		i := strings.LastIndex(line, "=")
		if i < 0 {
			continue
		}
		name, val := line[:i], line[i+1:]
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		v := int64(f)
		switch {
		case strings.Contains(name, "name=BytesOutPerSec") && strings.HasSuffix(name, ":Count"):
			w.topicBytes += v
		case strings.Contains(name, "name=TotalFetchRequestsPerSec") && strings.HasSuffix(name, ":Count"):
			w.topicFetches += v
		case strings.Contains(name, "socket-server-metrics") && strings.HasSuffix(name, ":outgoing-byte-total"):
			w.bytesOut += v
		case strings.Contains(name, "socket-server-metrics") && strings.HasSuffix(name, ":response-total"):
			w.requests += v
		case strings.HasPrefix(name, "java.lang:type=OperatingSystem") && strings.HasSuffix(name, ":ProcessCpuTime"):
			w.cpuNanos += v
		case strings.Contains(name, "name=LocalTimeMs") && strings.HasSuffix(name, ":Count"):
			cm := local[strings.TrimSuffix(name, ":Count")]
			cm[0] = f
			local[strings.TrimSuffix(name, ":Count")] = cm
		case strings.Contains(name, "name=LocalTimeMs") && strings.HasSuffix(name, ":Mean"):
			cm := local[strings.TrimSuffix(name, ":Mean")]
			cm[1] = f
			local[strings.TrimSuffix(name, ":Mean")] = cm
		default:
			continue
		}
		seen++
	}
	if seen < 4 {
		return w, fmt.Errorf("JmxTool answered no counters:\n%s", out)
	}
	if w.cpuNanos <= 0 {
		return w, fmt.Errorf("JmxTool answered no broker ProcessCpuTime:\n%s", out)
	}
	if len(local) == 0 {
		return w, fmt.Errorf("JmxTool answered no RequestMetrics LocalTimeMs:\n%s", out)
	}
	for _, cm := range local {
		w.localMicros += int64(cm[0] * cm[1] * 1000)
	}
	return w, nil
}
