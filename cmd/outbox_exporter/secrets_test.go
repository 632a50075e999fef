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

	r := &leakRun{t: t, ctx: ctx, dir: t.TempDir(), dsns: secretDSNs(server, dbName)}
	r.writeConfig(string(p.ConfigYAML()), server, dbName, secure.Brokers()[0])
	r.serveOutputs()
	r.commandOutputs()
	// What a panic or a %v of the configuration would print.
	cfg, _ := config.Load(r.cfgFile)
	r.collect("config printed", fmt.Sprintf("%v %+v %#v %v %+v", cfg, cfg.Databases["demo"], cfg.Kafka["secure"], *cfg.Databases["demo"], cfg.Kafka["refused"].SASL))
	searchLeaks(t, r.outputs)
}

// leakRun is one run of TestSecretsNeverLeak: the config it serves and
// every output gathered so far.
type leakRun struct {
	t       *testing.T
	ctx     context.Context
	dir     string
	dsns    map[string]string // secretDSNs
	cfgText string
	cfgFile string
	goodDSN string // the demo database's DSN in cfgText, quoted
	outputs []string
}

func (r *leakRun) collect(what, s string) { r.outputs = append(r.outputs, "== "+what+" ==\n"+s) }

// writeConfig writes the demo's config, with a password in the DSN (trust
// auth ignores it, so it is really sent nowhere but still handled
// everywhere), an outbox through each of the DSN forms, a SASL cluster the
// exporter logs into, and one it fails to log into.
func (r *leakRun) writeConfig(cfgText string, server *url.URL, dbName, broker string) {
	t := r.t
	u := *server
	u.User = url.UserPassword(u.User.Username(), dbSecret)
	u.Path = "/" + dbName
	r.goodDSN = jsonQ(u.String())
	dsnRe := regexp.MustCompile(`(?m)^    dsn: .*$`)
	cfgText = dsnRe.ReplaceAllString(cfgText, "    dsn: "+r.goodDSN)
	var extraDBs, extraOutboxes strings.Builder
	for _, name := range slices.Sorted(maps.Keys(r.dsns)) {
		fmt.Fprintf(&extraDBs, "  %s:\n    dsn: %s\n    max_connections: 1\n", name, jsonQ(r.dsns[name]))
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
`, broker, jsonQ(saslSecret), broker, badSecret), 1)
	if !strings.Contains(cfgText, "DbS3cret") {
		t.Fatalf("the DSN secret did not make it into the config:\n%s", cfgText)
	}
	r.cfgText = cfgText
	r.cfgFile = filepath.Join(r.dir, "config.yml")
	os.WriteFile(r.cfgFile, []byte(cfgText), 0o600)
	if _, err := config.Load(r.cfgFile); err != nil {
		t.Fatalf("test config does not load: %v", err)
	}
}

// withDSN is the config with the demo database's DSN replaced by dsn.
func (r *leakRun) withDSN(dsn string) []byte {
	return []byte(strings.Replace(r.cfgText, r.goodDSN, jsonQ(dsn), 1))
}

// serveOutputs serves the config at debug level and gathers /metrics, the
// page, every API, the answers to reloads and the serve log.
func (r *leakRun) serveOutputs() {
	t := r.t
	addr := freeAddr(t)
	var logs syncBuffer
	sctx, stop := context.WithCancel(r.ctx)
	done := make(chan int)
	go func() {
		done <- run(sctx, []string{"--config.file=" + r.cfgFile, "--log.level=debug", "--web.listen-address=" + addr, "--web.enable-lifecycle"}, io.Discard, &logs)
	}()
	fetch := r.fetcher("http://" + addr)
	// Let the reconcile schedule and the audit run once.
	var metrics string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		metrics = fetch("GET", "/metrics")
		if strings.Contains(metrics, "outbox_reconcile_last_success_timestamp_seconds{") &&
			strings.Contains(metrics, `outbox_exporter_collector_success{collector="kafka",target="secure"} 1`) {
			break
		}
	}
	r.checkSecretsInUse(metrics, fetch)
	// A reload with a broken DSN holding a password, then one that fixes it.
	for _, b := range brokenDSNs {
		os.WriteFile(r.cfgFile, r.withDSN(b), 0o600)
		if got := fetch("POST", "/-/reload"); !strings.Contains(got, "databases.demo.dsn: does not parse") {
			t.Errorf("reload with a broken DSN answered %q", got)
		}
	}
	os.WriteFile(r.cfgFile, []byte(r.cfgText), 0o600)
	if got := fetch("POST", "/-/reload"); !strings.Contains(got, "Reloaded") {
		t.Errorf("reload of the good config answered %q", got)
	}
	fetch("GET", "/metrics")
	fetch("GET", "/")
	stop()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d", code)
	}
	r.collect("serve logs", logs.String())
	if !strings.Contains(logs.String(), "level=DEBUG") && !strings.Contains(logs.String(), "level=debug") {
		t.Errorf("no debug lines in the log: the debug path was not exercised")
	}
}

// fetcher returns a function that requests a path of base, retrying for
// 10s while the server is not up, and collects the answer.
func (r *leakRun) fetcher(base string) func(method, path string) string {
	client := &http.Client{Timeout: 20 * time.Second}
	return func(method, path string) string {
		r.t.Helper()
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
			r.t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		r.collect(method+" "+path, string(b))
		return string(b)
	}
}

// checkSecretsInUse checks that the secrets were really in use (the SASL
// login worked, the wrong one did not, every DSN form collected) and
// fetches the page and every API.
func (r *leakRun) checkSecretsInUse(metrics string, fetch func(method, path string) string) {
	t := r.t
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
	for name := range r.dsns {
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
}

// commandOutputs runs check, reconcile and generate on the config, and
// check, serve and reconcile on each broken DSN, and collects what they
// print and write.
func (r *leakRun) commandOutputs() {
	runCmd := func(args ...string) {
		var out, errOut syncBuffer
		code := run(r.ctx, append(args, "--log.level=debug"), &out, &errOut)
		r.collect(strings.Join(args, " ")+fmt.Sprintf(" (exit %d)", code), out.String()+errOut.String())
	}
	runCmd("check", "--config.file="+r.cfgFile)
	runCmd("reconcile", "--config.file="+r.cfgFile, "--format=json")
	runCmd("reconcile", "--config.file="+r.cfgFile, "--format=text", "--full")
	runCmd("generate", "--config.file="+r.cfgFile, "--out="+filepath.Join(r.dir, "gen"))
	filepath.Walk(filepath.Join(r.dir, "gen"), func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			b, _ := os.ReadFile(path)
			r.collect(path, string(b))
		}
		return nil
	})
	for i, b := range brokenDSNs {
		broken := filepath.Join(r.dir, fmt.Sprintf("broken%d.yml", i))
		os.WriteFile(broken, r.withDSN(b), 0o600)
		runCmd("check", "--config.file="+broken)
		runCmd("--config.file="+broken, "--web.listen-address="+freeAddr(r.t))
		runCmd("reconcile", "--config.file="+broken)
	}
}

// searchLeaks searches all outputs for any piece of a secret.
func searchLeaks(t *testing.T, outputs []string) {
	t.Helper()
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
