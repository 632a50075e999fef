package kafkatest

// Real Apache Kafka for tests, next to kfake.
//
// kfake answers some requests differently from Kafka (an OFFSET_OUT_OF_RANGE
// Fetch carries -1 watermarks on Kafka, kfake fills them in; retention,
// compaction and KIP-848 groups are Kafka's own), so every case where the
// two can differ runs against the real broker too. Use:
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }   // stops the JVM at the end
//
//	func TestX(t *testing.T) {
//		b := kafkatest.Shared(t)       // started once per package, on first use
//		topic := kafkatest.Name(t)     // distinct topics and groups per test
//		...kgo.SeedBrokers(b.Brokers()...)...
//	}
//
// Main may take Options (broker config knobs) that the shared broker is
// started with; a test needing a different broker calls Start itself and
// defers Stop. Nothing skips: if the jars are missing or the JVM does not
// answer within the deadline, Shared fails the test and says why (run
// `bash scripts/deps.sh` to fetch the jars into .cache/kafka-<version>).
//
// ConsoleConsumer runs Kafka's own Java consumer (classic or KIP-848
// group.protocol=consumer) so groups are made by real clients too.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Options are the broker knobs tests need. Zero values take test-friendly
// defaults (fast retention checks, no initial task delay, small offsets topic).
type Options struct {
	// RetentionCheckInterval is log.retention.check.interval.ms: how soon
	// a topic's retention.ms or a DeleteRecords-free deletion is applied.
	RetentionCheckInterval time.Duration
	// SegmentBytes is log.segment.bytes for topics that do not set
	// segment.bytes themselves (Kafka's minimum is 1 MiB; per topic it
	// may be lower through the topic config).
	SegmentBytes int
	// OffsetsPartitions is offsets.topic.num.partitions.
	OffsetsPartitions int
	// ConsumerSession and ConsumerHeartbeat set the KIP-848 group
	// (group.consumer.*) session timeout and heartbeat interval,
	// including their minimums, so tests see members leave quickly.
	ConsumerSession   time.Duration
	ConsumerHeartbeat time.Duration
	// TxnAbortInterval is
	// transaction.abort.timed.out.transaction.cleanup.interval.ms: how
	// often the broker aborts transactions open past their producer's
	// transaction.timeout.ms (Kafka's default is 10 s; 250 ms here, so a
	// test sees the abort within its timeout plus a fraction of a second).
	TxnAbortInterval time.Duration
	// Extra are more server.properties lines; they win over the above.
	Extra map[string]string
	// StartTimeout bounds format + start + first answer; default 5 min
	// (the machine may be shared by several JVMs and other work).
	StartTimeout time.Duration
	// JVM are more flags for the broker JVMs. Shared uses QuickJVM.
	JVM []string
	// Heap is the JVM -Xmx; default 768m.
	Heap string
	// Log4j, when set, is the nodes' log4j2 configuration (the text of a
	// log4j2.properties file) instead of errors only to stderr: a
	// benchmark reading the broker's request log sets it.
	Log4j string
	// Nodes is how many nodes (default 1): node 1 is broker and KRaft
	// controller, the others brokers only, so that a partition can have
	// a leader and a follower (a leader change is a real one). Internal
	// topics keep replication factor 1.
	Nodes int
}

// Broker is one running Kafka node (broker and KRaft controller).
type Broker struct {
	// Version is the Kafka version of the jars (from scripts/kafka/pom.xml).
	Version string
	addr    string
	dir     string
	libs    string
	cmd     *exec.Cmd
	out     *tailBuffer
	done    chan struct{}
	waitErr error
	stop    sync.Once
	// others are the broker-only nodes of a multi-node cluster.
	others []*Broker
}

// Brokers returns the bootstrap list (one loopback address).
func (b *Broker) Brokers() []string {
	out := []string{b.addr}
	for _, o := range b.others {
		out = append(out, o.addr)
	}
	return out
}

// othersDone is closed when any broker-only node's JVM has exited.
func (b *Broker) othersDone() <-chan struct{} {
	if len(b.others) == 0 {
		return nil
	}
	ch := make(chan struct{})
	for _, o := range b.others {
		go func(o *Broker) {
			select {
			case <-o.done:
				select {
				case <-ch:
				default:
					close(ch)
				}
			case <-ch:
			}
		}(o)
	}
	return ch
}

// Real reports that this is Apache Kafka, not kfake.
func (b *Broker) Real() bool { return true }

// Dir is the broker's temp folder (log dirs, config).
func (b *Broker) Dir() string { return b.dir }

// Output returns the last lines the JVM wrote (for failure messages).
func (b *Broker) Output() string {
	out := b.out.String()
	for _, o := range b.others {
		out += o.out.String()
	}
	return out
}

// Libs finds the Kafka jars: $OUTBOX_KAFKA_LIBS, else
// <repo root>/.cache/kafka-<version>/libs with the version from
// scripts/kafka/pom.xml; the repo root is the first folder up from the
// working directory holding go.mod.
func Libs() (dir, version string, err error) {
	root, err := repoRoot()
	if err != nil {
		return "", "", err
	}
	pom, err := os.ReadFile(filepath.Join(root, "scripts", "kafka", "pom.xml"))
	if err != nil {
		return "", "", fmt.Errorf("kafkatest: read the pinned Kafka version: %w", err)
	}
	m := regexp.MustCompile(`<kafka.version>([^<]+)</kafka.version>`).FindSubmatch(pom)
	if m == nil {
		return "", "", errors.New("kafkatest: scripts/kafka/pom.xml has no <kafka.version>")
	}
	version = string(m[1])
	dir = os.Getenv("OUTBOX_KAFKA_LIBS")
	if dir == "" {
		dir = filepath.Join(root, ".cache", "kafka-"+version, "libs")
	}
	if _, err := os.Stat(filepath.Join(dir, "kafka_2.13-"+version+".jar")); err != nil {
		return "", "", fmt.Errorf("kafkatest: Apache Kafka %s jars not found in %s (run `bash scripts/deps.sh`): %w", version, dir, err)
	}
	return dir, version, nil
}

func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("kafkatest: working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("kafkatest: no go.mod above the working directory")
		}
		d = up
	}
}

// Start formats a temp log dir and starts a single-node KRaft cluster on
// free loopback ports, returning once a kadm client gets its metadata.
// The caller must Stop it. The JVM is also killed if this process dies.
func Start(opts Options) (*Broker, error) {
	libs, version, err := Libs()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, fmt.Errorf("kafkatest: java not on PATH (Kafka %s needs Java 17+): %w", version, err)
	}
	dir, err := os.MkdirTemp("", "kafkatest-")
	if err != nil {
		return nil, fmt.Errorf("kafkatest: temp dir: %w", err)
	}
	nodes := max(opts.Nodes, 1)
	ports, err := freePorts(nodes + 1)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := func(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])) }
	ctrl := addr(nodes) // the controller listener of node 1
	mk := func(i int, d string) *Broker {
		return &Broker{Version: version, addr: addr(i), dir: d, libs: libs, out: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	}
	b := mk(0, dir)
	for i := 1; i < nodes; i++ {
		d := filepath.Join(dir, "node-"+strconv.Itoa(i+1))
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("kafkatest: node dir: %w", err)
		}
		b.others = append(b.others, mk(i, d))
	}
	all := append([]*Broker{b}, b.others...)
	for i, n := range all {
		if err := n.writeConfig(i+1, ctrl, opts); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	id := clusterID()
	for _, n := range all {
		if out, err := n.java(ctx, "kafka.tools.StorageTool", "format", "-t", id, "-c", n.path("server.properties")).CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("kafkatest: kafka-storage format: %w\n%s", err, out)
		}
	}
	for _, n := range all {
		if err := n.launch(opts.Heap, opts.JVM); err != nil {
			b.Stop()
			return nil, err
		}
	}
	if err := b.awaitReady(ctx, nodes); err != nil {
		out := b.Output()
		b.Stop()
		return nil, fmt.Errorf("kafkatest: Apache Kafka %s did not answer on %s within %s: %w\nlast output:\n%s", version, b.addr, timeout, err, out)
	}
	return b, nil
}

// launch starts the node's JVM.
func (b *Broker) launch(heap string, flags []string) error {
	if heap == "" {
		heap = "768m"
	}
	b.cmd = b.java(context.Background(), "kafka.Kafka", b.path("server.properties"))
	pre := append([]string{"-Xmx" + heap, "-Xms128m"}, flags...)
	b.cmd.Args = append(b.cmd.Args[:1], append(pre, b.cmd.Args[1:]...)...)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	// Pdeathsig fires when the OS thread that forked the JVM exits, not
	// the process: start it from a goroutine locked to its thread that
	// lives as long as the JVM does.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := b.cmd.Start(); err != nil {
			started <- err
			close(b.done)
			return
		}
		started <- nil
		b.waitErr = b.cmd.Wait()
		close(b.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("kafkatest: start kafka.Kafka: %w", err)
	}
	return nil
}

func (b *Broker) path(name string) string { return filepath.Join(b.dir, name) }

// writeConfig writes node id's server.properties: node 1 is broker and
// the KRaft controller (on ctrl), later nodes are brokers only.
func (b *Broker) writeConfig(id int, ctrl string, o Options) error {
	ms := func(d, def time.Duration) string {
		if d == 0 {
			d = def
		}
		return strconv.FormatInt(d.Milliseconds(), 10)
	}
	orInt := func(v, def int) string {
		if v == 0 {
			v = def
		}
		return strconv.Itoa(v)
	}
	props := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          strconv.Itoa(id),
		"controller.quorum.voters":                         "1@" + ctrl,
		"listeners":                                        "PLAINTEXT://" + b.addr + ",CONTROLLER://" + ctrl,
		"advertised.listeners":                             "PLAINTEXT://" + b.addr,
		"controller.listener.names":                        "CONTROLLER",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"listener.security.protocol.map":                   "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                                         b.path("data"),
		"offsets.topic.replication.factor":                 "1",
		"offsets.topic.num.partitions":                     orInt(o.OffsetsPartitions, 4),
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "2",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		"group.initial.rebalance.delay.ms":                 "0",
		"log.retention.check.interval.ms":                  ms(o.RetentionCheckInterval, 500*time.Millisecond),
		// Retention and the cleaner start 30 s after boot by default.
		"log.initial.task.delay.ms":                                   "0",
		"log.cleaner.backoff.ms":                                      "500",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": ms(o.TxnAbortInterval, 250*time.Millisecond),
		"auto.create.topics.enable":                                   "false",
		// Tests write records with old timestamps: the default 7-day
		// retention would delete them as soon as a segment rolls. A
		// test wanting retention sets retention.ms on its topic.
		"log.retention.ms":    "-1",
		"log.retention.bytes": "-1",
	}
	if id > 1 {
		props["process.roles"] = "broker"
		props["listeners"] = "PLAINTEXT://" + b.addr
	}
	if o.SegmentBytes > 0 {
		props["log.segment.bytes"] = strconv.Itoa(o.SegmentBytes)
	}
	if o.ConsumerSession > 0 {
		props["group.consumer.min.session.timeout.ms"] = ms(o.ConsumerSession, 0)
		props["group.consumer.session.timeout.ms"] = ms(o.ConsumerSession, 0)
	}
	if o.ConsumerHeartbeat > 0 {
		props["group.consumer.min.heartbeat.interval.ms"] = ms(o.ConsumerHeartbeat, 0)
		props["group.consumer.heartbeat.interval.ms"] = ms(o.ConsumerHeartbeat, 0)
	}
	for k, v := range o.Extra {
		props[k] = v
	}
	if err := WriteProperties(b.path("server.properties"), props); err != nil {
		return fmt.Errorf("kafkatest: write server.properties: %w", err)
	}
	return b.writeLog4j(o.Log4j)
}

// WriteProperties writes a Java properties file of props, one key=value
// a line in key order (the broker's and Kafka Connect's configuration).
func WriteProperties(path string, props map[string]string) error {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&sb, "%s=%s\n", k, props[k])
	}
	return os.WriteFile(path, []byte(sb.String()), 0o600)
}

func (b *Broker) writeLog4j(log4j string) error {
	// Errors only, to stderr: the test log shows why a JVM failed, not
	// Kafka's chatter.
	const quiet = "status = error\nrootLogger.level = ERROR\nrootLogger.appenderRef.stderr.ref = STDERR\n" +
		"appender.stderr.type = Console\nappender.stderr.name = STDERR\nappender.stderr.target = SYSTEM_ERR\n" +
		"appender.stderr.layout.type = PatternLayout\nappender.stderr.layout.pattern = [%d] %p %m (%c)%n\n"
	if log4j == "" {
		log4j = quiet
	}
	if err := os.WriteFile(b.path("log4j2.properties"), []byte(log4j), 0o600); err != nil {
		return fmt.Errorf("kafkatest: write log4j2.properties: %w", err)
	}
	return nil
}

// java builds a JVM command on Kafka's classpath with the quiet log4j.
func (b *Broker) java(ctx context.Context, main string, args ...string) *exec.Cmd {
	all := append([]string{"-cp", filepath.Join(b.libs, "*"),
		"-Dlog4j2.configurationFile=" + b.path("log4j2.properties"),
		"-XX:+UseSerialGC", "-Xss1m", main}, args...)
	cmd := exec.CommandContext(ctx, "java", all...)
	// The JVM must not outlive a test binary killed by a timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (b *Broker) awaitReady(ctx context.Context, nodes int) error {
	var last error = errors.New("no answer yet")
	others := b.othersDone()
	for {
		select {
		case <-b.done:
			return fmt.Errorf("the JVM exited: %v", b.waitErr)
		case <-others:
			return errors.New("a broker-only node's JVM exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		default:
		}
		if err := b.clusterUp(ctx, nodes); err != nil {
			last = err
		} else {
			return nil
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// clusterUp asks, with a client of its own, whether all nodes have
// registered and a controller is known. A new client each time: a client
// kept from before the listeners were up was seen to go on failing (on a
// busy machine, for minutes) while a fresh one got the answer at once.
func (b *Broker) clusterUp(ctx context.Context, nodes int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.DisableClientMetrics(), kgo.RetryTimeout(time.Second))
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(rctx)
	switch {
	case err != nil:
		return err
	case len(md.Brokers) < nodes:
		return fmt.Errorf("%d of %d nodes registered", len(md.Brokers), nodes)
	case md.Controller < 0:
		return errors.New("no controller known")
	}
	return nil
}

// QuickJVM starts a test broker with less CPU: the C1 compiler only. A
// test broker serves little; on a shared machine its start-up is what
// costs (benchmarks leave it out).
var QuickJVM = []string{"-XX:TieredStopAtLevel=1"}

// Stop kills the JVM and removes its folder. Safe to call twice.
func (b *Broker) Stop() {
	b.stop.Do(func() {
		for _, o := range b.others {
			o.Stop()
		}
		if b.cmd != nil && b.cmd.Process != nil {
			// A test broker keeps no data worth a clean shutdown.
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		_ = os.RemoveAll(b.dir)
	})
}
