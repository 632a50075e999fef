package cdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// connect is Kafka Connect standalone running Debezium's PostgreSQL
// connector (pgoutput) with the outbox EventRouter SMT: the real capture
// pipeline the cdc signals are proven against. Its offsets live in a file
// that survives Stop, so Start again resumes from where it stopped.
type connect struct {
	t       *testing.T
	dir     string
	worker  string
	conn    string
	restURL string
	cmd     *exec.Cmd
	done    chan struct{}
	log     *os.File
	shim    string
}

// repoDir is the checkout's root, where .cache holds the jars.
func repoDir(t *testing.T) string {
	t.Helper()
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		p := filepath.Dir(d)
		if p == d {
			t.Fatal("no go.mod above the working directory")
		}
		d = p
	}
}

// newConnect writes the worker and connector configuration: the
// connector captures tables of database db on the cluster at pgPort into
// slot, routing each outbox row to outbox.event.<aggregatetype> with the
// event id in the "id" header.
func newConnect(t *testing.T, b *kafkatest.Broker, pgPort int, db, slot string, tables []string) *connect {
	t.Helper()
	root := repoDir(t)
	kafkaLibs, _, err := kafkatest.Libs()
	if err != nil {
		t.Fatal(err)
	}
	dbz := filepath.Join(root, ".cache", "debezium-3.6.1.Final")
	if _, err := os.Stat(filepath.Join(dbz, "libs", "debezium-connector-postgres-3.6.1.Final.jar")); err != nil {
		t.Fatalf("Debezium 3.6.1.Final is not in %s (run `bash scripts/deps.sh`): %v", dbz, err)
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	c := &connect{t: t, dir: dir, worker: filepath.Join(dir, "worker.properties"), conn: filepath.Join(dir, "outbox.properties"),
		restURL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	err = errors.Join(
		kafkatest.WriteProperties(c.worker, map[string]string{
			"bootstrap.servers":            strings.Join(b.Brokers(), ","),
			"key.converter":                "org.apache.kafka.connect.storage.StringConverter",
			"value.converter":              "org.apache.kafka.connect.storage.StringConverter",
			"offset.storage.file.filename": filepath.Join(dir, "offsets.dat"),
			"offset.flush.interval.ms":     "500",
			// The folder holding libs/: Connect loads every jar in libs
			// into one plugin class loader.
			"plugin.path":      dbz,
			"plugin.discovery": "only_scan",
			"listeners":        c.restURL,
		}),
		kafkatest.WriteProperties(c.conn, map[string]string{
			"name":                        "outbox",
			"connector.class":             "io.debezium.connector.postgresql.PostgresConnector",
			"tasks.max":                   "1",
			"plugin.name":                 "pgoutput",
			"database.hostname":           "127.0.0.1",
			"database.port":               fmt.Sprint(pgPort),
			"database.user":               "postgres",
			"database.password":           "unused-trust-auth",
			"database.dbname":             db,
			"topic.prefix":                "cdc",
			"slot.name":                   slot,
			"table.include.list":          strings.Join(append(tables, "public.debezium_heartbeat"), ","),
			"publication.autocreate.mode": "filtered",
			"snapshot.mode":               "no_data",
			// Debezium confirms a position to the slot only when it
			// processes an event: after a restart it ignores the commit
			// of what it streamed while locating its resume position, and
			// an idle outbox never confirms again, so the slot reads as
			// lagging (it is: it holds the WAL). Its documented remedy is
			// a heartbeat action query writing to a captured table; the
			// router handles only the outbox tables' topics.
			"heartbeat.interval.ms":                       "1000",
			"heartbeat.action.query":                      "INSERT INTO debezium_heartbeat (id, at) VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = EXCLUDED.at",
			"transforms.outbox.predicate":                 "outboxTables",
			"predicates":                                  "outboxTables",
			"predicates.outboxTables.type":                "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
			"predicates.outboxTables.pattern":             `cdc\.public\.outbox.*`,
			"tombstones.on.delete":                        "false",
			"transforms":                                  "outbox",
			"transforms.outbox.type":                      "io.debezium.transforms.outbox.EventRouter",
			"transforms.outbox.route.topic.replacement":   "outbox.event.${routedByValue}",
			"transforms.outbox.table.expand.json.payload": "false",
		}),
		os.WriteFile(filepath.Join(dir, "log4j2.properties"), []byte("status = error\nrootLogger.level = WARN\nrootLogger.appenderRef.out.ref = OUT\n"+
			"appender.out.type = Console\nappender.out.name = OUT\nappender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%d] %p %m (%c)%n\n"+
			"logger.pg.name = io.debezium.connector.postgresql\nlogger.pg.level = INFO\n"), 0o600),
	)
	if err != nil {
		t.Fatal(err)
	}
	_ = kafkaLibs
	c.shim = compileSanitizerShim(t, dir)
	t.Cleanup(c.Stop)
	return c
}

// sanitizerShim bridges a real incompatibility between the pinned
// versions: Debezium 3.6.1.Final calls
// org.apache.kafka.common.utils.Sanitizer.jmxSanitize to name its JMX
// metrics, and Kafka 4.4.0 moved that class to
// org.apache.kafka.common.utils.internals. Without it the connector's task
// fails at start with NoClassDefFoundError. The shim delegates to the
// moved class and sits on the worker's class path, where plugin class
// loaders find Kafka's own packages.
const sanitizerShim = `package org.apache.kafka.common.utils;

public final class Sanitizer {
    private Sanitizer() {}
    public static String sanitize(String name) { return org.apache.kafka.common.utils.internals.Sanitizer.sanitize(name); }
    public static String desanitize(String name) { return org.apache.kafka.common.utils.internals.Sanitizer.desanitize(name); }
    public static String jmxSanitize(String name) { return org.apache.kafka.common.utils.internals.Sanitizer.jmxSanitize(name); }
}
`

func compileSanitizerShim(t *testing.T, dir string) string {
	t.Helper()
	kafkaLibs, _, err := kafkatest.Libs()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "shim-src", "Sanitizer.java")
	out := filepath.Join(dir, "shim")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte(sanitizerShim), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("javac", "-d", out, "-cp", filepath.Join(kafkaLibs, "kafka-clients-*.jar"), src)
	clients, _ := filepath.Glob(filepath.Join(kafkaLibs, "kafka-clients-*.jar"))
	if len(clients) != 1 {
		t.Fatalf("kafka-clients jar in %s: %v", kafkaLibs, clients)
	}
	cmd.Args[4] = clients[0]
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compile the Sanitizer shim (javac from a JDK 17 is needed): %v\n%s", err, b)
	}
	return out
}

// Start runs the worker. It returns at once; wait on the slot or the
// topic for it to work.
func (c *connect) Start() {
	c.t.Helper()
	kafkaLibs, _, err := kafkatest.Libs()
	if err != nil {
		c.t.Fatal(err)
	}
	c.log, err = os.OpenFile(filepath.Join(c.dir, "connect.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	c.cmd = exec.Command("java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dlog4j2.configurationFile="+filepath.Join(c.dir, "log4j2.properties"),
		"-cp", filepath.Join(kafkaLibs, "*")+string(os.PathListSeparator)+c.shim,
		"org.apache.kafka.connect.cli.ConnectStandalone", c.worker, c.conn)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	// The JVM must not outlive a test binary killed by a timeout.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		c.t.Fatalf("start Kafka Connect: %v", err)
	}
	c.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(c.cmd, c.done)
}

// Stop shuts the worker down as an operator would (SIGTERM: the task
// stops and offsets are flushed), killing it if it takes over a minute.
func (c *connect) Stop() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd = nil
	c.log.Close()
}

// Status is the connector's task state from the REST API, or the error.
func (c *connect) Status(ctx context.Context) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.restURL+"/connectors/outbox/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Log is the tail of the worker's log, for failure messages.
func (c *connect) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "connect.log"))
	if len(b) > 60000 {
		b = b[len(b)-60000:]
	}
	return string(b)
}
