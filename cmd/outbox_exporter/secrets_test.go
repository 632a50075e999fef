package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-exporter/outbox_exporter/demo"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

const (
	dbSecret   = "DbS3cret-4f9a1c"
	saslSecret = "SaslS3cret-77b2e0"
	badSecret  = "BadS3cret-0d0d0d"
)

// TestSecretsNeverLeak runs every output path of the binary — serve logs
// at debug level, /metrics, the page, every API, reload errors, check,
// reconcile, generate, and a start that fails on a broken DSN — with known
// DSN and SASL passwords, and searches all of it.
func TestSecretsNeverLeak(t *testing.T) {
	server, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	dbName := fmt.Sprintf("oxs_%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := demo.Start(ctx, demo.Options{DatabaseURL: pgtest.ServerURL(), Database: dbName, DropOnClose: true, Rate: 10}, nil)
	if err != nil {
		t.Fatalf("demo pipeline: %v", err)
	}
	defer p.Close()
	for _, k := range []demo.FaultKind{demo.FaultAckLost, demo.FaultMissingOutbox} {
		if _, err := p.InjectFault(ctx, k); err != nil {
			t.Fatalf("inject %s: %v", k, err)
		}
	}
	secure := kafkatest.New(t, 1, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "exporter", saslSecret), kfake.SeedTopics(1, "messages"))

	// The demo's config, with a password in the DSN (trust auth ignores
	// it, so it is really sent nowhere but still handled everywhere), a
	// SASL cluster the exporter logs into, and one it fails to log into.
	cfgText := string(p.ConfigYAML())
	u := *server
	u.User = url.UserPassword(u.User.Username(), dbSecret)
	u.Path = "/" + dbName
	dsnRe := regexp.MustCompile(`(?m)^    dsn: .*$`)
	cfgText = dsnRe.ReplaceAllString(cfgText, "    dsn: "+fmt.Sprintf("%q", u.String()))
	cfgText = strings.Replace(cfgText, "kafka:\n", fmt.Sprintf(`kafka:
  secure:
    brokers: [%s]
    sasl: {mechanism: SCRAM-SHA-256, username: exporter, password: %s}
    groups: ["/.*/"]
  refused:
    brokers: [%s]
    sasl: {mechanism: SCRAM-SHA-512, username: exporter, password: %s}
    groups: ["/.*/"]
`, secure.Brokers()[0], saslSecret, secure.Brokers()[0], badSecret), 1)
	if !strings.Contains(cfgText, dbSecret) {
		t.Fatalf("the DSN secret did not make it into the config:\n%s", cfgText)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yml")
	os.WriteFile(cfgFile, []byte(cfgText), 0o600)
	if _, err := config.Load(cfgFile); err != nil {
		t.Fatalf("test config does not load: %v", err)
	}

	var outputs []string
	collect := func(what, s string) { outputs = append(outputs, "== "+what+" ==\n"+s) }

	// serve at debug level.
	addr := freeAddr(t)
	var logs syncBuffer
	sctx, stop := context.WithCancel(ctx)
	done := make(chan int)
	go func() {
		done <- run(sctx, []string{"--config.file=" + cfgFile, "--log.level=debug", "--web.listen-address=" + addr}, io.Discard, &logs)
	}()
	base := "http://" + addr
	client := &http.Client{Timeout: 20 * time.Second}
	fetch := func(method, path string) string {
		t.Helper()
		var resp *http.Response
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			req, _ := http.NewRequest(method, base+path, nil)
			resp, err = client.Do(req)
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		collect(method+" "+path, string(b))
		return string(b)
	}
	// Let the reconcile schedule and the audit run once.
	var metrics string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		metrics = fetch("GET", "/metrics")
		if strings.Contains(metrics, "outbox_reconcile_last_success_timestamp_seconds{") &&
			strings.Contains(metrics, `outbox_exporter_collector_success{collector="kafka",target="secure"} 1`) {
			break
		}
	}
	// The secrets were really in use: the SASL login worked, the wrong one did not.
	for _, want := range []string{
		`outbox_exporter_collector_success{collector="kafka",target="secure"} 1`,
		`outbox_exporter_collector_success{collector="kafka",target="refused"} 0`,
		`outbox_exporter_collector_success{collector="outbox",target="messages"} 1`,
		"outbox_reconcile_last_success_timestamp_seconds{",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s; the test would not exercise the secrets", want)
		}
	}
	page := fetch("GET", "/")
	if !strings.Contains(page, "messages") {
		t.Errorf("page does not show the outbox")
	}
	fetch("GET", "/api/v1/stuck?outbox=messages&limit=50")
	fetch("GET", "/api/v1/reconcile?job=search_index")
	fetch("GET", "/api/v1/audit?outbox=messages")
	fetch("GET", "/api/v1/stuck?outbox=nope")
	// A reload with a broken DSN holding a password, then one that fixes it.
	os.WriteFile(cfgFile, []byte(strings.Replace(cfgText, u.String(), "postgres://exporter:"+badSecret+"@127.0.0.1:notaport/x", 1)), 0o600)
	fetch("POST", "/-/reload")
	os.WriteFile(cfgFile, []byte(cfgText), 0o600)
	fetch("POST", "/-/reload")
	stop()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d", code)
	}
	collect("serve logs", logs.String())
	if !strings.Contains(logs.String(), "level=DEBUG") && !strings.Contains(logs.String(), "level=debug") {
		t.Errorf("no debug lines in the log: the debug path was not exercised")
	}

	runCmd := func(args ...string) {
		var out, errOut syncBuffer
		code := run(ctx, append(args, "--log.level=debug"), &out, &errOut)
		collect(strings.Join(args, " ")+fmt.Sprintf(" (exit %d)", code), out.String()+errOut.String())
	}
	runCmd("check", "--config.file="+cfgFile)
	runCmd("reconcile", "--config.file="+cfgFile, "--format=json")
	runCmd("reconcile", "--config.file="+cfgFile, "--format=text", "--full")
	runCmd("generate", "--config.file="+cfgFile, "--out="+filepath.Join(dir, "gen"))
	filepath.Walk(filepath.Join(dir, "gen"), func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			b, _ := os.ReadFile(path)
			collect(path, string(b))
		}
		return nil
	})
	broken := filepath.Join(dir, "broken.yml")
	os.WriteFile(broken, []byte(strings.Replace(cfgText, u.String(), "postgres://exporter:"+badSecret+"@127.0.0.1:notaport/x", 1)), 0o600)
	runCmd("check", "--config.file="+broken)
	runCmd("--config.file="+broken, "--web.listen-address="+freeAddr(t))

	// What a panic or a %v of the configuration would print.
	cfg, _ := config.Load(cfgFile)
	collect("config printed", fmt.Sprintf("%v %+v %#v %v %+v", cfg, cfg.Databases["demo"], cfg.Kafka["secure"], *cfg.Databases["demo"], cfg.Kafka["refused"].SASL))

	all := strings.Join(outputs, "\n")
	for _, secret := range []string{dbSecret, saslSecret, badSecret} {
		if i := strings.Index(all, secret); i >= 0 {
			lo, hi := max(0, i-300), min(len(all), i+100)
			t.Errorf("secret %q leaked:\n...%s...", secret, all[lo:hi])
		}
	}
	if len(all) < 10000 {
		t.Errorf("only %d bytes of output searched; some path produced nothing", len(all))
	}
	t.Logf("searched %d bytes from %d outputs", len(all), len(outputs))
}
