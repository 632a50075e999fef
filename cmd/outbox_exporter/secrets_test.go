package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-exporter/outbox_exporter/demo"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// Secrets hold the bytes libpq's grammars and YAML treat specially; each
// alphanumeric run in them is unique, so finding one in any output is a
// leak of part of a secret.
const (
	dbSecret   = `DbS3cret/4f9a@Qx7?Wm2#Lp4&Ty=Gh8 Zr5'Nk3\Vb6%41`
	saslSecret = `SaslS3cret/77b2e0@Ks9 'Hd4"Yc1\Fw8`
	badSecret  = "BadS3cret-0d0d0d"
)

// secretDSNs write secrets into DSNs in every form libpq accepts, each
// pointing at the test's server and database (trust authentication: the
// secrets are handled everywhere but checked nowhere).
func secretDSNs(server *url.URL, db string) map[string]string {
	host, port := server.Hostname(), server.Port()
	pw := func(tag string) string { return tag + `Pw/a@b?c#d&e=f g'h\i%41` }
	kvq := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	kvu := func(s string) string { return regexp.MustCompile(`([\s'\\])`).ReplaceAllString(s, `\$1`) }
	base := fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", server.User.Username(), host, port, db)
	kv := fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable", host, port, server.User.Username(), db)
	return map[string]string{
		"url_query":      base + "&password=" + url.QueryEscape(pw("Uq1")),
		"url_sslpass":    base + "&sslpassword=" + url.QueryEscape(pw("Us2")),
		"kv_quoted":      kv + " password=" + kvq(pw("Kq3")),
		"kv_escaped":     kv + " password=" + kvu(pw("Ke4")),
		"kv_sslpass":     kv + " sslpassword=" + kvq(pw("Ks5")),
		"kv_spaced":      kv + " password = " + kvq(pw("Kp6")),
		"url_encoded_pw": fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", url.UserPassword(server.User.Username(), pw("Ue7")).String(), host, port, db),
	}
}

// brokenDSNs do not parse; a password in them may sit anywhere.
var brokenDSNs = []string{
	"postgres://exporter:Br1x/Cy2z@127.0.0.1:5432/x",
	"postgres://exporter:Dz3q?Ew4r@127.0.0.1:notaport/x",
	"postgres://exporter:Ff5s@Gg6t@127.0.0.1:bad/x?password=Hh7u",
	"host=127.0.0.1 password='Fv5w Gu6x",
	"host=127.0.0.1 password=Ht7y Is8z",
	"postgres://u:" + badSecret + "@127.0.0.1:notaport/x",
}

var secretRun = regexp.MustCompile(`[\p{L}\p{N}]{3,}`)

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
	cfgText = dsnRe.ReplaceAllString(cfgText, "    dsn: "+jsonQ(u.String()))
	dsns := secretDSNs(server, dbName)
	var extraDBs, extraOutboxes strings.Builder
	for _, name := range slices.Sorted(maps.Keys(dsns)) {
		fmt.Fprintf(&extraDBs, "  %s:\n    dsn: %s\n    max_connections: 1\n", name, jsonQ(dsns[name]))
		fmt.Fprintf(&extraOutboxes, "  via_%s:\n    database: %s\n    table: public.outbox\n    id: event_id\n    created_at: created_at\n    status: status\n    pending: [PENDING]\n    in_flight: [CLAIMED]\n    published: [PUBLISHED]\n    dead: [ABANDONED]\n    last_error: last_error\n    deadline: 5m\n", name, name)
	}
	cfgText = strings.Replace(cfgText, "databases:\n", "databases:\n"+extraDBs.String(), 1)
	cfgText = strings.Replace(cfgText, "outboxes:\n", "outboxes:\n"+extraOutboxes.String(), 1)
	cfgText = strings.Replace(cfgText, "kafka:\n", fmt.Sprintf(`kafka:
  secure:
    brokers: [%s]
    sasl: {mechanism: SCRAM-SHA-256, username: exporter, password: %s}
    groups: ["/.*/"]
  refused:
    brokers: [%s]
    sasl: {mechanism: SCRAM-SHA-512, username: exporter, password: %s}
    groups: ["/.*/"]
`, secure.Brokers()[0], jsonQ(saslSecret), secure.Brokers()[0], badSecret), 1)
	if !strings.Contains(cfgText, "DbS3cret") {
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
		done <- run(sctx, []string{"--config.file=" + cfgFile, "--log.level=debug", "--web.listen-address=" + addr, "--web.enable-lifecycle"}, io.Discard, &logs)
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
	for name := range dsns {
		if got := fetch("GET", "/api/v1/stuck?outbox=via_"+name); !strings.Contains(got, `"rows"`) {
			t.Errorf("stuck rows through the %s DSN: %s", name, got)
		}
		if !strings.Contains(metrics, `outbox_exporter_collector_success{collector="outbox",target="via_`+name+`"} 1`) {
			t.Errorf("the outbox on the %s DSN was not collected: the DSN was not in use", name)
		}
	}
	fetch("GET", "/api/v1/stuck?outbox=messages&limit=5000")
	fetch("GET", "/api/v1/reconcile?job=nope")
	fetch("GET", "/api/v1/audit?outbox=nope")
	fetch("GET", "/api/v1/reconcile?job=search_index")
	fetch("GET", "/api/v1/audit?outbox=messages")
	fetch("GET", "/api/v1/stuck?outbox=nope")
	// A reload with a broken DSN holding a password, then one that fixes it.
	for _, b := range brokenDSNs {
		os.WriteFile(cfgFile, []byte(strings.Replace(cfgText, jsonQ(u.String()), jsonQ(b), 1)), 0o600)
		if got := fetch("POST", "/-/reload"); !strings.Contains(got, "databases.demo.dsn: does not parse") {
			t.Errorf("reload with a broken DSN answered %q", got)
		}
	}
	os.WriteFile(cfgFile, []byte(cfgText), 0o600)
	if got := fetch("POST", "/-/reload"); !strings.Contains(got, "Reloaded") {
		t.Errorf("reload of the good config answered %q", got)
	}
	fetch("GET", "/metrics")
	fetch("GET", "/")
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
	for i, b := range brokenDSNs {
		broken := filepath.Join(dir, fmt.Sprintf("broken%d.yml", i))
		os.WriteFile(broken, []byte(strings.Replace(cfgText, jsonQ(u.String()), jsonQ(b), 1)), 0o600)
		runCmd("check", "--config.file="+broken)
		runCmd("--config.file="+broken, "--web.listen-address="+freeAddr(t))
		runCmd("reconcile", "--config.file="+broken)
	}

	// What a panic or a %v of the configuration would print.
	cfg, _ := config.Load(cfgFile)
	collect("config printed", fmt.Sprintf("%v %+v %#v %v %+v", cfg, cfg.Databases["demo"], cfg.Kafka["secure"], *cfg.Databases["demo"], cfg.Kafka["refused"].SASL))

	all := strings.Join(outputs, "\n")
	secrets := append([]string{dbSecret, saslSecret, badSecret}, brokenDSNs...)
	// The DSN forms' passwords are TAG + "Pw/...": the tag run is theirs.
	if m := regexp.MustCompile(`[A-Z][a-z][0-9]Pw`).FindString(all); m != "" {
		i := strings.Index(all, m)
		t.Errorf("the password %s... leaked:\n...%s...", m, all[max(0, i-300):min(len(all), i+100)])
	}
	for _, secret := range secrets {
		for _, run := range secretRun.FindAllString(secret, -1) {
			if !regexp.MustCompile(`[0-9]`).MatchString(run) || strings.Contains(run, "127") || run == "5432" {
				continue // not a piece of a secret (host, port)
			}
			if i := strings.Index(all, run); i >= 0 {
				lo, hi := max(0, i-300), min(len(all), i+100)
				t.Errorf("%q of secret %q leaked:\n...%s...", run, secret, all[lo:hi])
			}
		}
	}
	if len(all) < 10000 {
		t.Errorf("only %d bytes of output searched; some path produced nothing", len(all))
	}
	t.Logf("searched %d bytes from %d outputs", len(all), len(outputs))
}

// jsonQ quotes s as a JSON string, which is a YAML double-quoted scalar.
func jsonQ(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
