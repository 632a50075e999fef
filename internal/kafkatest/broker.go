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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
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
	// Extra are more server.properties lines; they win over the above.
	Extra map[string]string
	// StartTimeout bounds format + start + first answer; default 120 s
	// (the machine may be shared by several JVMs).
	StartTimeout time.Duration
	// Heap is the JVM -Xmx; default 768m.
	Heap string
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
}

// Brokers returns the bootstrap list (one loopback address).
func (b *Broker) Brokers() []string { return []string{b.addr} }

// Real reports that this is Apache Kafka, not kfake.
func (b *Broker) Real() bool { return true }

// Dir is the broker's temp folder (log dirs, config).
func (b *Broker) Dir() string { return b.dir }

// Output returns the last lines the JVM wrote (for failure messages).
func (b *Broker) Output() string { return b.out.String() }

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
	ports, err := freePorts(2)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Broker{Version: version, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), dir: dir, libs: libs,
		out: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	if err := b.writeConfig(ports, opts); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 120 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if out, err := b.java(ctx, "kafka.tools.StorageTool", "format", "-t", clusterID(), "-c", b.path("server.properties")).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kafkatest: kafka-storage format: %w\n%s", err, out)
	}
	heap := opts.Heap
	if heap == "" {
		heap = "768m"
	}
	b.cmd = b.java(context.Background(), "kafka.Kafka", b.path("server.properties"))
	b.cmd.Args = append(b.cmd.Args[:1], append([]string{"-Xmx" + heap, "-Xms128m"}, b.cmd.Args[1:]...)...)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kafkatest: start kafka.Kafka: %w", err)
	}
	go func() { b.waitErr = b.cmd.Wait(); close(b.done) }()
	if err := b.awaitReady(ctx); err != nil {
		b.Stop()
		return nil, fmt.Errorf("kafkatest: Apache Kafka %s did not answer on %s within %s: %w\nlast output:\n%s", version, b.addr, timeout, err, b.Output())
	}
	return b, nil
}

func (b *Broker) path(name string) string { return filepath.Join(b.dir, name) }

func (b *Broker) writeConfig(ports []int, o Options) error {
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
	ctrl := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	props := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          "1",
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
		"log.initial.task.delay.ms": "0",
		"log.cleaner.backoff.ms":    "500",
		"auto.create.topics.enable": "false",
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
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s=%s\n", k, props[k])
	}
	if err := os.WriteFile(b.path("server.properties"), []byte(sb.String()), 0o600); err != nil {
		return fmt.Errorf("kafkatest: write server.properties: %w", err)
	}
	// Errors only, to stderr: the test log shows why a JVM failed, not
	// Kafka's chatter.
	const log4j = "status = error\nrootLogger.level = ERROR\nrootLogger.appenderRef.stderr.ref = STDERR\n" +
		"appender.stderr.type = Console\nappender.stderr.name = STDERR\nappender.stderr.target = SYSTEM_ERR\n" +
		"appender.stderr.layout.type = PatternLayout\nappender.stderr.layout.pattern = [%d] %p %m (%c)%n\n"
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

func (b *Broker) awaitReady(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.DisableClientMetrics(), kgo.RetryTimeout(time.Second))
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error = errors.New("no answer yet")
	for {
		select {
		case <-b.done:
			return fmt.Errorf("the JVM exited: %v", b.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		md, err := adm.BrokerMetadata(rctx)
		cancel()
		if err == nil && len(md.Brokers) > 0 && md.Controller >= 0 {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// Stop kills the JVM and removes its folder. Safe to call twice.
func (b *Broker) Stop() {
	b.stop.Do(func() {
		if b.cmd != nil && b.cmd.Process != nil {
			// A test broker keeps no data worth a clean shutdown.
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		_ = os.RemoveAll(b.dir)
	})
}

var shared struct {
	mu   sync.Mutex
	opts Options
	b    *Broker
	err  error
	done bool
}

// Main runs the package's tests with the shared broker's options and
// stops the broker afterwards. Call it from TestMain.
func Main(m *testing.M, opts ...Options) {
	if len(opts) > 0 {
		shared.opts = opts[0]
	}
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// Shared returns the package's broker, starting it on first use. It fails
// the test (never skips) if Kafka cannot start; later callers get the
// same error without retrying.
func Shared(t testing.TB) *Broker {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.done {
		shared.done = true
		shared.b, shared.err = Start(shared.opts)
	}
	if shared.err != nil {
		t.Fatalf("real Kafka broker: %v", shared.err)
	}
	return shared.b
}

// StopShared stops the shared broker if one was started.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.b != nil {
		shared.b.Stop()
		shared.b = nil
	}
}

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

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kafkatest: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// clusterID is a random KRaft cluster id (16 bytes, URL-safe base64).
func clusterID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	return base64.RawURLEncoding.EncodeToString(u[:])
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
