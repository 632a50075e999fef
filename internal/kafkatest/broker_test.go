package kafkatest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { Main(m) }

// The helper's own proof: the shared broker answers, and Kafka's console
// consumer commits where it stopped in a classic and a KIP-848 group.
func TestBrokerAndConsoleConsumer(t *testing.T) {
	b := Shared(t)
	if b.Version == "" {
		t.Fatal("no Kafka version recorded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...), kgo.DefaultProduceTopic(Name(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := Name(t, "t")
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	for _, proto := range []string{"classic", "consumer"} {
		group := Name(t, proto)
		vals, err := b.Consume(ctx, ConsoleConsumer{Topic: topic, Group: group, Protocol: proto, Messages: 4, FromBeginning: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(vals) != 4 || vals[0] != "0" || vals[3] != "3" {
			t.Fatalf("%s: console consumer printed %q, want 0..3", proto, vals)
		}
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatalf("%s: fetch offsets: %v", proto, err)
		}
		o, ok := offs.Lookup(topic, 0)
		// The consumer may have fetched past what it printed, but it
		// commits the position after the last record it returned.
		if !ok || o.At != 4 {
			t.Fatalf("%s: committed %+v (found %v), want 4", proto, o, ok)
		}
		dg, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			t.Fatalf("%s: describe: %v", proto, err)
		}
		t.Logf("%s group %s: %+v", proto, group, dg[group].State)
	}
}

// The broker looks for transactions open past their timeout every 250 ms
// unless told otherwise, so that a test sees the broker abort one within
// seconds.
func TestConfigTxnAbortInterval(t *testing.T) {
	const key = "transaction.abort.timed.out.transaction.cleanup.interval.ms="
	for _, c := range []struct {
		opt  time.Duration
		want string
	}{{0, "250"}, {3 * time.Second, "3000"}} {
		b := &Broker{dir: t.TempDir(), addr: "127.0.0.1:1"}
		if err := b.writeConfig(1, "127.0.0.1:2", Options{TxnAbortInterval: c.opt}); err != nil {
			t.Fatal(err)
		}
		props, err := os.ReadFile(b.path("server.properties"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(props), "\n"+key+c.want+"\n") {
			t.Errorf("TxnAbortInterval %v: server.properties has no %s%s:\n%s", c.opt, key, c.want, props)
		}
	}
}
