package generate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

func TestAlertmanagerRoutes(t *testing.T) {
	amtool := requireTool(t, "amtool")
	for _, c := range []struct {
		labels []string
		want   string
	}{
		{[]string{"alertname=OutboxNotificationDeadlineMissed", "severity=critical", "outbox=messages"}, "pager"},
		{[]string{"alertname=OutboxExporterAbsent", "severity=critical", "job=outbox_exporter"}, "pager"},
		{[]string{"alertname=OutboxDeadEvents", "severity=warning", "outbox=messages"}, "ticket"},
		{[]string{"alertname=Unrelated"}, "ticket"},
	} {
		args := append([]string{"config", "routes", "test", "--config.file=" + filepath.Join(deployDir, "alertmanager.yml")}, c.labels...)
		cmd := exec.Command(amtool, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("amtool %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
		}
		if got := strings.TrimSpace(string(out)); got != c.want {
			t.Errorf("%v routes to %q, want %q", c.labels, got, c.want)
		}
	}
}

// TestAlertmanagerInhibition runs Alertmanager with deploy/alertmanager.yml
// and checks that a critical alert on an outbox inhibits the warnings on
// the same outbox, and only those.
func TestAlertmanagerInhibition(t *testing.T) {
	base, client := startAlertmanager(t)
	postAlerts(t, client, base, []map[string]any{
		amAlert("OutboxNotificationDeadlineMissed", "critical", "messages"),
		amAlert("OutboxDeadEvents", "warning", "messages"),
		amAlert("OutboxDeadEvents", "warning", "other"),
		amAlert("OutboxExporterAbsent", "critical", ""),
		amAlert("OutboxCollectorFailing", "warning", "", "collector", "outbox", "target", "messages", "instance", "a:9899"),
		amAlert("OutboxCollectorFailingEverywhere", "critical", "", "collector", "outbox", "target", "messages"),
		amAlert("OutboxCollectorFailing", "warning", "", "collector", "kafka", "target", "main", "instance", "a:9899"),
		amAlert("OutboxExporterTargetDown", "warning", "", "instance", "b:9899"),
	})

	want := map[string]bool{ // alertname/outbox -> inhibited
		"OutboxNotificationDeadlineMissed/messages": false,
		"OutboxDeadEvents/messages":                 true,
		"OutboxDeadEvents/other":                    false,
		"OutboxExporterAbsent/":                     false,
		"OutboxCollectorFailing/outbox":             true,
		"OutboxCollectorFailingEverywhere/outbox":   false,
		"OutboxCollectorFailing/kafka":              false,
		"OutboxExporterTargetDown/":                 true,
	}
	var got map[string]bool
	for deadline := time.Now().Add(25 * time.Second); time.Now().Before(deadline); {
		var err error
		got, err = inhibited(client, base)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("inhibited alerts: got %v, want %v", got, want)
}

// startAlertmanager runs Alertmanager with deploy/alertmanager.yml on a
// free port until the test ends (its log shown if the test failed) and
// waits until its API answers. It returns the API's base URL.
func startAlertmanager(t *testing.T) (string, *http.Client) {
	t.Helper()
	am := requireTool(t, "prometheus-alertmanager")
	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, am,
		"--config.file="+filepath.Join(deployDir, "alertmanager.yml"),
		"--storage.path="+t.TempDir(),
		"--web.listen-address="+addr,
		"--cluster.listen-address=",
	)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("alertmanager log:\n%s", logs.String())
		}
	})
	base := "http://" + addr + "/api/v2"
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get(base + "/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, client
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alertmanager did not start on %s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// amAlert is an alert firing since a minute ago, from the exporter's job,
// on outbox (if set), with extra label name-value pairs.
func amAlert(name, severity, outbox string, extra ...string) map[string]any {
	labels := map[string]string{"alertname": name, "severity": severity, "job": "outbox_exporter"}
	if outbox != "" {
		labels["outbox"] = outbox
	}
	for i := 0; i+1 < len(extra); i += 2 {
		labels[extra[i]] = extra[i+1]
	}
	return map[string]any{"labels": labels, "startsAt": time.Now().Add(-time.Minute).Format(time.RFC3339)}
}

func postAlerts(t *testing.T, client *http.Client, base string, alerts []map[string]any) {
	t.Helper()
	body, _ := json.Marshal(alerts)
	resp, err := client.Post(base+"/alerts", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("post alerts: %s", resp.Status)
	}
}

// inhibited lists the alerts Alertmanager holds and whether each is
// inhibited.
func inhibited(client *http.Client, base string) (map[string]bool, error) {
	resp, err := client.Get(base + "/alerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var alerts []struct {
		Labels map[string]string `json:"labels"`
		Status struct {
			InhibitedBy []string `json:"inhibitedBy"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		return nil, fmt.Errorf("decode alerts: %w", err)
	}
	out := map[string]bool{}
	for _, a := range alerts {
		out[a.Labels["alertname"]+"/"+a.Labels["outbox"]+a.Labels["collector"]] = len(a.Status.InhibitedBy) > 0
	}
	return out, nil
}
