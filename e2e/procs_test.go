package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// install says how to get the external programs the test runs.
const install = "install them with `apt-get install -y --no-install-recommends prometheus prometheus-alertmanager chromium` (or run scripts/deps.sh as root)"

// requireBin finds a program on PATH or fails the test saying how to
// install it: a missing tool must not pass for a skipped proof.
func requireBin(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH: %v; the end-to-end test needs Prometheus 2.42, Alertmanager 0.25 and Chromium: %s", name, err, install)
	}
	return p
}

// syncBuffer collects output written from several goroutines.
type syncBuffer = testutil.SyncBuffer

// tail returns at most the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// proc is a program the test started in its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	err  error
}

// startProc starts a program in a process group of its own, killed with
// its children when the test ends (pass or fail) or if the test binary
// dies. Its output is logged when the test fails.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", name, tail(p.logs.String(), 6000))
		}
	})
	return p
}

// stop ends the process group: SIGTERM, then SIGKILL after 10s.
func (p *proc) stop() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	// Children may outlive the leader: kill the whole group regardless.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// freeAddr returns a 127.0.0.1 address with a port nobody listens on now.
var freeAddr = testutil.FreeAddr

// waitReady polls url until it answers 200, the process exits, or d
// passes.
func waitReady(t *testing.T, p *proc, url string, d time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(d)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p.exited() {
			t.Fatalf("%s exited before it was ready (%v):\n%s", p.name, p.err, tail(p.logs.String(), 4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s within %s: %v", p.name, url, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runChromium runs headless Chromium once with args in a process group of
// its own, bounded by timeout, and returns its standard output.
func runChromium(ctx context.Context, bin, userDataDir string, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + userDataDir}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		// Chromium's helpers (zygote, crashpad) may outlive it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %s: %w", timeout, err)
		}
		return stdout.Bytes(), fmt.Errorf("chromium %v: %w\n%s", args, err, tail(stderr.String(), 3000))
	}
	return stdout.Bytes(), nil
}
