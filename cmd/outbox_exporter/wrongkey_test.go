package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wrongKeyPassword is a password pasted under max_connections.
const wrongKeyPassword = "Hq4PastedPw-Zr8"

// A password pasted under a key that wants a number is refused by a
// reload, in its answer and its log line, and by check, each naming the
// key and the line and none quoting the value.
func TestWrongKeySecretNotEchoed(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yml")
	good := fmt.Sprintf(minimalConfig, "pw")
	if err := os.WriteFile(cfgFile, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	var logs syncBuffer
	stop := serveInBackground([]string{"--config.file=" + cfgFile, "--web.listen-address=" + addr, "--web.enable-lifecycle"}, &logs)
	defer stop()

	// The good config is loaded before the bad one is written.
	client := &http.Client{Timeout: 10 * time.Second}
	ready := "no answer"
	waitUntil(t, 15*time.Second, "the exporter is ready", func() bool {
		resp, err := client.Get("http://" + addr + "/-/ready")
		if err != nil {
			ready = err.Error()
			return false
		}
		resp.Body.Close()
		ready = resp.Status
		return resp.StatusCode == http.StatusOK
	}, &ready)
	bad := strings.Replace(good, "    dsn:", "    max_connections: "+wrongKeyPassword+"\n    dsn:", 1)
	if err := os.WriteFile(cfgFile, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	answer := "no answer"
	waitUntil(t, 15*time.Second, "the reload is refused", func() bool {
		resp, err := client.Post("http://"+addr+"/-/reload", "", nil)
		if err != nil {
			answer = err.Error()
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer = string(b)
		return resp.StatusCode == http.StatusInternalServerError
	}, &answer)
	t.Logf("reload answered: %s", answer)
	waitUntil(t, 15*time.Second, "the failed reload is logged", func() bool {
		return strings.Contains(logs.String(), "databases.main.max_connections")
	}, nil)
	var out, errOut syncBuffer
	code := run(context.Background(), []string{"check", "--config.file=" + cfgFile}, &out, &errOut)
	if code == 0 {
		t.Errorf("check passed a config with a password under max_connections")
	}
	for what, text := range map[string]string{"reload answer": answer, "log": logs.String(), "check": out.String() + errOut.String()} {
		if strings.Contains(text, "Hq4") || strings.Contains(text, "Zr8") || strings.Contains(text, "PastedPw") {
			t.Errorf("the %s quotes the password:\n%s", what, text)
		}
		if !strings.Contains(text, "databases.main.max_connections: expected a whole number") || !strings.Contains(text, "(line 4)") {
			t.Errorf("the %s does not name the key and its line:\n%s", what, text)
		}
	}
}

// waitUntil polls ok until it holds, failing the test when within passes
// first, when last is set, saying what was seen last.
func waitUntil(t *testing.T, within time.Duration, what string, ok func() bool, last *string) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			if last != nil {
				t.Fatalf("%s: not within %v; last seen: %s", what, within, *last)
			}
			t.Fatalf("%s: not within %v", what, within)
		}
	}
}
