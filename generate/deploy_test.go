package generate

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// configMap renders the Kubernetes ConfigMap that carries a config file.
func configMap(config []byte) ([]byte, error) {
	cm := map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":   "outbox-exporter-config",
			"labels": map[string]string{"app.kubernetes.io/name": "outbox-exporter"},
		},
		"data": map[string]string{"outbox_exporter.yml": helmConfig(config)},
	}
	var buf bytes.Buffer
	buf.WriteString("# deploy/example.yml as the exporter's config, with a broker address that\n# resolves inside a cluster; kept equal to it by go test ./generate\n# (-update rewrites it).\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(cm); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

func TestKubernetesConfigMapIsCurrent(t *testing.T) {
	example, err := os.ReadFile(filepath.Join(deployDir, "example.yml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := configMap(example)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(deployDir, "kubernetes", "configmap.yml")
	if *update {
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("deploy/kubernetes/configmap.yml does not carry deploy/example.yml; run go test ./generate -update")
	}
	// And it decodes back to the same bytes.
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(got, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["outbox_exporter.yml"] != helmConfig(example) {
		t.Error("the ConfigMap's outbox_exporter.yml is not deploy/example.yml with the in-cluster broker")
	}
	if strings.Contains(cm.Data["outbox_exporter.yml"], "127.0.0.1") {
		t.Error("the ConfigMap's config names a loopback address, which no pod can reach")
	}
}

// TestKubernetesManifests reads the resources the kustomization lists and
// checks what the issue asks of them: probes, resources, non-root, DSNs
// from a Secret, the generated rules in the PrometheusRule, and the job
// label the rules' selector expects. (It reads the YAML itself rather than
// running kubectl, which the CI machine need not have.)
func TestKubernetesManifests(t *testing.T) {
	dir := filepath.Join(deployDir, "kubernetes")
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]map[string]any{}
	for _, r := range k.Resources {
		raw, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Errorf("kustomization lists %s: %v", r, err)
			continue
		}
		var doc map[string]any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Errorf("%s: %v", r, err)
			continue
		}
		kind, _ := doc["kind"].(string)
		kinds[kind] = doc
	}
	for _, k := range []string{"ConfigMap", "Deployment", "Service", "ServiceMonitor", "PrometheusRule", "NetworkPolicy", "PodDisruptionBudget"} {
		if kinds[k] == nil {
			t.Fatalf("the kustomization has no %s", k)
		}
	}
	dep, _ := yaml.Marshal(kinds["Deployment"])
	for _, want := range []string{
		"path: /-/healthy", "path: /-/ready", "runAsNonRoot: true", "readOnlyRootFilesystem: true",
		"allowPrivilegeEscalation: false", "secretKeyRef:", "name: OUTBOX_DSN", "name: SEARCH_DSN",
		"memory: 256Mi", "--web.listen-address=:9899", "containerPort: 9899", "name: outbox-exporter-config",
	} {
		if !strings.Contains(string(dep), want) {
			t.Errorf("Deployment lacks %q", want)
		}
	}
	if strings.Contains(string(dep), ":latest") || !strings.Contains(string(dep), "image: ghcr.io/outbox-exporter/outbox_exporter:v") {
		t.Error("the Deployment's image is not pinned to a version tag")
	}
	np, _ := yaml.Marshal(kinds["NetworkPolicy"])
	for _, want := range []string{"port: 9899", "port: 53", "port: 5432", "port: 9092", "- Ingress", "- Egress"} {
		if !strings.Contains(string(np), want) {
			t.Errorf("NetworkPolicy lacks %q", want)
		}
	}
	sm, _ := yaml.Marshal(kinds["ServiceMonitor"])
	if !strings.Contains(string(sm), "replacement: outbox_exporter") {
		t.Error("ServiceMonitor does not set job=outbox_exporter, which alerting.selector expects")
	}
	// The PrometheusRule carries exactly the generated rule groups.
	var rulesFile struct {
		Groups any `yaml:"groups"`
	}
	raw, err = os.ReadFile(filepath.Join(deployDir, filepath.FromSlash(RulesFile)))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &rulesFile); err != nil {
		t.Fatal(err)
	}
	a, _ := yaml.Marshal(rulesFile.Groups)
	spec, _ := kinds["PrometheusRule"]["spec"].(map[string]any)
	b, _ := yaml.Marshal(spec["groups"])
	if !bytes.Equal(a, b) {
		t.Error("the PrometheusRule's groups differ from deploy/rules/outbox.rules.yml")
	}
}

// TestMonitoringRole runs deploy/postgres/monitoring-role.sql on two
// throwaway databases shaped like the example's and checks, connected as
// the role, that it reads the granted columns and nothing else, and that
// its sessions are read-only.
func TestMonitoringRole(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatal("psql is not installed; install it with: apt-get install -y --no-install-recommends postgresql-client")
	}
	role := testRole(t)
	app, search := roleDatabases(t)

	// The script takes the password from the environment, never from -v.
	runScript := func() ([]byte, error) {
		cmd := exec.Command(psql, app.URL, "-X", "-q",
			"-v", "role="+role, "-v", "app_db="+app.Name, "-v", "search_db="+search.Name,
			"-f", filepath.Join(deployDir, "postgres", "monitoring-role.sql"))
		cmd.Env = append(os.Environ(), "OUTBOX_MONITOR_PASSWORD=s3cret")
		return cmd.CombinedOutput()
	}
	if out, err := runScript(); err != nil {
		t.Fatalf("psql -f monitoring-role.sql: %v\n%s", err, out)
	}
	// Running it again must work too (it updates the role).
	if out, err := runScript(); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	appConn, searchConn := connectAs(t, ctx, app, role, "s3cret"), connectAs(t, ctx, search, role, "s3cret")
	allowed := []struct {
		conn *pgx.Conn
		sql  string
	}{
		{appConn, `SELECT event_id, created_at, event_type, topic, status, published_at, lease_until, attempts, last_error, message_id, message_version FROM public.outbox`},
		{appConn, `SELECT id, version, created_at FROM public.messages`},
		{searchConn, `SELECT message_id, version FROM public.search_index`},
	}
	for _, q := range allowed {
		if err := queryAll(ctx, q.conn, q.sql); err != nil {
			t.Errorf("%s: %v", q.sql, err)
		}
	}
	denied := []struct {
		conn *pgx.Conn
		sql  string
	}{
		{appConn, `SELECT payload FROM public.outbox`},
		{appConn, `SELECT body FROM public.messages`},
		{appConn, `SELECT * FROM public.outbox`},
		{searchConn, `SELECT content FROM public.search_index`},
		{appConn, `UPDATE public.outbox SET status = 'PUBLISHED'`},
		{appConn, `CREATE TABLE public.x (a int)`},
	}
	for _, q := range denied {
		if queryAll(ctx, q.conn, q.sql) == nil {
			t.Errorf("%s succeeded as the monitoring role", q.sql)
		}
	}
	var ro string
	if err := appConn.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&ro); err != nil || ro != "on" {
		t.Errorf("default_transaction_read_only = %q, %v; want on", ro, err)
	}
}

// testRole names a role of its own for the test and drops it when the
// test ends. Call it before pgtest.New: cleanups run last-first, so the
// role is dropped after the databases that hold its grants.
func testRole(t *testing.T) string {
	t.Helper()
	role := fmt.Sprintf("outbox_monitor_test_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgtest.ServerURL())
		if err != nil {
			t.Errorf("drop role: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	return role
}

// roleDatabases makes the example's two databases: the application's
// (outbox and messages, with columns the role must not read) and the
// search index's.
func roleDatabases(t *testing.T) (app, search *pgtest.DB) {
	t.Helper()
	app, search = pgtest.New(t), pgtest.New(t)
	app.Exec(t, `CREATE TABLE public.outbox (
		event_id text PRIMARY KEY, created_at timestamptz NOT NULL, event_type text, topic text,
		status text, published_at timestamptz, lease_until timestamptz, attempts int, last_error text,
		message_id text, message_version int, payload jsonb,
		conversation_id text, seq bigint, receipt_id text)`)
	app.Exec(t, `CREATE TABLE public.messages (id text PRIMARY KEY, version int, created_at timestamptz, body text)`)
	app.Exec(t, `INSERT INTO public.outbox VALUES ('e1', now(), 'order.paid', 'orders', 'PENDING', NULL, NULL, 0, NULL, 'm1', 1, '{"secret": 1}', 'c1', 1, NULL)`)
	app.Exec(t, `INSERT INTO public.messages VALUES ('m1', 1, now(), 'private body')`)
	search.Exec(t, `CREATE TABLE public.search_index (message_id text PRIMARY KEY, version int, content text)`)
	return app, search
}

// connectAs connects to db as role, closed when the test ends.
func connectAs(t *testing.T, ctx context.Context, db *pgtest.DB, role, password string) *pgx.Conn {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// queryAll runs sql and reads all its rows; it returns the error, if any.
func queryAll(ctx context.Context, conn *pgx.Conn, sql string) error {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// helmDir is the Helm chart.
const helmDir = deployDir + "/helm/outbox-exporter"

// helmConfig is the chart's default config: deploy/example.yml with a
// broker address that resolves inside a cluster.
func helmConfig(example []byte) string {
	return strings.Replace(string(example), "brokers: [127.0.0.1:9092]", "brokers: [kafka-bootstrap.kafka.svc:9092]", 1)
}

// TestHelmChartIsCurrent: the chart's default config is deploy/example.yml
// (broker aside), and its files/ hold the rules and dashboards generate
// makes for it; -update rewrites files/.
func TestHelmChartIsCurrent(t *testing.T) {
	example, err := os.ReadFile(filepath.Join(deployDir, "example.yml"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(helmDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config string `yaml:"config"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	if want := helmConfig(example); values.Config != want {
		t.Errorf("values.yaml config is not deploy/example.yml with the in-cluster broker")
	}
	if strings.Contains(values.Config, "127.0.0.1") {
		t.Error("the chart's config names a loopback address, which no pod can reach")
	}
	files := deployFiles(t)
	want := map[string][]byte{"outbox.rules.yml": files[RulesFile]}
	for name, b := range files {
		if strings.HasPrefix(name, DashboardDir+"/") && strings.HasSuffix(name, ".json") {
			want["dashboards/"+strings.TrimPrefix(name, DashboardDir+"/")] = b
		}
	}
	for name, b := range want {
		p := filepath.Join(helmDir, "files", filepath.FromSlash(name))
		if *update {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s is not the current output of generate (run go test ./generate -update): %v", p, err)
		}
	}
	have, _ := filepath.Glob(filepath.Join(helmDir, "files", "dashboards", "*.json"))
	if len(have) != len(want)-1 {
		t.Errorf("files/dashboards holds %d dashboards, generate makes %d", len(have), len(want)-1)
	}
}

// TestDockerignoreKeepsTheBuild: .dockerignore keeps the build context
// small without dropping a file the image's build compiles or embeds.
func TestDockerignoreKeepsTheBuild(t *testing.T) {
	raw, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var excluded []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "!") {
			excluded = append(excluded, l)
		}
	}
	ignored := func(rel string) bool {
		parts := strings.Split(rel, "/")
		for _, pat := range excluded {
			anyDepth := strings.HasPrefix(pat, "**/")
			pat = strings.TrimPrefix(pat, "**/")
			for i := range parts {
				// A pattern matches a path or a directory above it; a
				// **/ pattern matches a directory at any depth.
				candidate := strings.Join(parts[:i+1], "/")
				if anyDepth {
					candidate = parts[i]
				}
				if ok, _ := filepath.Match(pat, candidate); ok {
					return true
				}
			}
		}
		return false
	}
	if !ignored(".git/config") || !ignored("alerts/testdata/multi.yml") || ignored("cmd/outbox_exporter/main.go") {
		t.Fatal("the .dockerignore matcher of this test is wrong")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}`, "../cmd/outbox_exporter").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fs := strings.Fields(line)
		rel, err := filepath.Rel(root, fs[0])
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // the standard library and the module cache
		}
		for _, f := range fs[1:] {
			if p := filepath.ToSlash(filepath.Join(rel, f)); ignored(p) {
				t.Errorf(".dockerignore drops %s, which the build needs", p)
			}
		}
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if ignored(f) {
			t.Errorf(".dockerignore drops %s", f)
		}
	}
}
