package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Kafka's own Java clients and tools on the broker's classpath, and names
// for tests sharing one broker.

var nameSeq struct {
	sync.Mutex
	n int
}

// Name returns a topic/group name unique within the process, readable
// from the test's name, for tests sharing one broker.
func Name(t testing.TB, suffix ...string) string {
	nameSeq.Lock()
	nameSeq.n++
	n := nameSeq.n
	nameSeq.Unlock()
	base := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), "_")
	if len(base) > 150 {
		base = base[:150]
	}
	s := base + "." + strconv.Itoa(n)
	for _, x := range suffix {
		s += "." + x
	}
	return s
}

// ConsoleConsumer is one run of Kafka's own console consumer in a group.
type ConsoleConsumer struct {
	Topic string
	Group string
	// Protocol is "classic" or "consumer" (KIP-848); empty means classic.
	Protocol string
	// Messages is how many records to read before it exits; it commits
	// what it read on exit (auto commit is on with a group).
	Messages int
	// Props are more consumer properties (key=value).
	Props map[string]string
	// FromBeginning starts an uncommitted group at the log start.
	FromBeginning bool
}

// Consume runs the console consumer until it has read c.Messages records
// and exited (so its offsets are committed), or ctx ends. It returns the
// records' values in the order printed.
func (b *Broker) Consume(ctx context.Context, c ConsoleConsumer) ([]string, error) {
	if c.Messages <= 0 {
		return nil, errors.New("kafkatest: ConsoleConsumer.Messages must be > 0 so it exits")
	}
	proto := c.Protocol
	if proto == "" {
		proto = "classic"
	}
	args := []string{"--bootstrap-server", b.addr, "--topic", c.Topic, "--group", c.Group,
		"--max-messages", strconv.Itoa(c.Messages),
		"--command-property", "group.protocol=" + proto,
		"--command-property", "client.id=kafkatest-console"}
	if c.FromBeginning {
		args = append(args, "--from-beginning")
	}
	keys := make([]string, 0, len(c.Props))
	for k := range c.Props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--command-property", k+"="+c.Props[k])
	}
	cmd := b.java(ctx, "org.apache.kafka.tools.consumer.ConsoleConsumer", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kafkatest: console consumer (%s group %s on %s): %w\n%s", proto, c.Group, c.Topic, err, stderr.String())
	}
	out := strings.TrimRight(stdout.String(), "\n")
	if out == "" {
		return nil, nil
	}
	return strings.Split(out, "\n"), nil
}

// RunTool runs another Kafka tool main class on the broker's classpath
// (e.g. org.apache.kafka.tools.consumer.group.ConsumerGroupCommand) and
// returns its combined output.
func (b *Broker) RunTool(ctx context.Context, main string, args ...string) (string, error) {
	out, err := b.java(ctx, main, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kafkatest: %s: %w\n%s", main, err, out)
	}
	return string(out), nil
}
