package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGHUP reloads: a good config takes effect without a restart, a bad one
// keeps the old config running and sets the reload gauge to 0.
func TestSIGHUPReload(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yml")
	cfg := fmt.Sprintf(minimalConfig, "pw")
	os.WriteFile(cfgFile, []byte(cfg), 0o600)
	addr := freeAddr(t)
	var logs syncBuffer
	stop := serveInBackground([]string{"--config.file=" + cfgFile, "--web.listen-address=" + addr, "--scrape.timeout=2s"}, &logs)
	defer stop()
	client := &http.Client{Timeout: 10 * time.Second}
	metrics := func() string {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		var last string
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if last = metrics(); ok(last) {
				return
			}
		}
		t.Fatalf("%s: not seen within 15s; logs:\n%s", what, logs.String())
	}
	waitFor("first load", func(m string) bool {
		return strings.Contains(m, "outbox_exporter_config_last_reload_successful 1")
	})

	// A good change: a second outbox appears without a restart.
	second := cfg + "  second:\n    database: main\n    table: public.outbox2\n    id: id\n    created_at: created_at\n    deadline: 1m\n"
	os.WriteFile(cfgFile, []byte(second), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor("second outbox after SIGHUP", func(m string) bool {
		return strings.Contains(m, `outbox_exporter_collector_success{collector="outbox",target="second"}`)
	})

	// A bad change: the old configuration keeps running, the gauge says 0.
	os.WriteFile(cfgFile, []byte(strings.Replace(second, "deadline: 1m", "deadline: 1 minute", 1)), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor("failed reload", func(m string) bool {
		return strings.Contains(m, "outbox_exporter_config_last_reload_successful 0") &&
			strings.Contains(m, `outbox_exporter_collector_success{collector="outbox",target="second"}`)
	})
	if !strings.Contains(logs.String(), `outboxes.second.deadline`) {
		t.Errorf("the failed reload's log does not name the key:\n%s", logs.String())
	}
}
