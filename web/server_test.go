package web

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/web/history"
)

const goodConfig = `
databases:
  main:
    dsn: postgres://exporter@127.0.0.1:5432/nowhere
outboxes:
  messages: {database: main, table: public.outbox, id: event_id, created_at: created_at, deadline: 5m}
`

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestServer(t *testing.T, cfg string) (*Server, string) {
	t.Helper()
	return serveConfig(t, cfg, Options{ScrapeTimeout: 2 * time.Second, EnableLifecycle: true})
}

// serveConfig writes cfg to a config file and starts a Server on it with
// opts (a quiet logger unless opts has one), closed when the test ends.
// It returns the server and the config file's path.
func serveConfig(t *testing.T, cfg string, opts Options) (*Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.ConfigFile = path
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, path
}

func get(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code, rec.Body.String()
}

func TestNewRefusesBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yml")
	os.WriteFile(path, []byte("outboxes: {x: {deadline: soon}}"), 0o600)
	_, err := New(context.Background(), Options{ConfigFile: path, Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), `outboxes.x.deadline: is not a duration`) {
		t.Fatalf("want the config error, got %v", err)
	}
}

// A bad reload keeps the running configuration and reports 0; a good one
// takes effect and reports 1.
func TestReload(t *testing.T) {
	s, path := newTestServer(t, goodConfig)
	h := s.Handler()
	first := s.App()

	os.WriteFile(path, []byte(strings.Replace(goodConfig, "deadline: 5m", "deadline: five", 1)), 0o600)
	if code, body := get(t, h, "POST", "/-/reload"); code != 500 || !strings.Contains(body, "outboxes.messages.deadline") {
		t.Fatalf("bad reload answered %d %q", code, body)
	}
	if s.App() != first {
		t.Fatal("a failed reload replaced the running app")
	}
	if _, body := get(t, h, "GET", "/metrics"); !strings.Contains(body, "outbox_exporter_config_last_reload_successful 0") {
		t.Fatalf("reload gauge not 0 after a failed reload:\n%s", grep(body, "reload"))
	}

	os.WriteFile(path, []byte(strings.Replace(goodConfig, "deadline: 5m", "deadline: 7m", 1)), 0o600)
	if code, body := get(t, h, "POST", "/-/reload"); code != 200 {
		t.Fatalf("good reload answered %d %q", code, body)
	}
	if got := s.App().Config.Outboxes["messages"].Deadline; got != 7*time.Minute {
		t.Fatalf("deadline after reload %v, want 7m", got)
	}
	if _, body := get(t, h, "GET", "/metrics"); !strings.Contains(body, "outbox_exporter_config_last_reload_successful 1") {
		t.Fatalf("reload gauge not 1:\n%s", grep(body, "reload"))
	}
	if code, _ := get(t, h, "GET", "/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload answered %d, want 405", code)
	}
}

func TestHealthReadyAndBuildInfo(t *testing.T) {
	s, _ := newTestServer(t, goodConfig)
	h := s.Handler()
	for _, p := range []string{"/-/healthy", "/-/ready"} {
		if code, _ := get(t, h, "GET", p); code != 200 {
			t.Errorf("%s answered %d", p, code)
		}
	}
	_, body := get(t, h, "GET", "/metrics")
	for _, want := range []string{`outbox_exporter_build_info{`, `goversion="go`, `revision=`, `version="`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestScrapeTimeoutHeader(t *testing.T) {
	s := &Server{opts: Options{ScrapeTimeout: 10 * time.Second, TimeoutOffset: 500 * time.Millisecond}}
	for hdr, want := range map[string]time.Duration{
		"":      10 * time.Second,
		"3":     2500 * time.Millisecond,
		"0.2":   10 * time.Second, // would leave nothing after the offset
		"bogus": 10 * time.Second,
		"-1":    10 * time.Second,
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if hdr != "" {
			r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", hdr)
		}
		if got := s.scrapeTimeout(r); got != want {
			t.Errorf("header %q: timeout %v, want %v", hdr, got, want)
		}
	}
}

func TestStatusAgainstDeadline(t *testing.T) {
	for _, tc := range []struct {
		age, deadline float64
		want          Status
	}{{0, 60, OK}, {29, 60, OK}, {30, 60, Warn}, {59.9, 60, Warn}, {60, 60, Crit}, {600, 60, Crit}, {5, 0, Unknown}} {
		if got := statusFor(tc.age, tc.deadline); got != tc.want {
			t.Errorf("statusFor(%v, %v) = %v, want %v", tc.age, tc.deadline, got, tc.want)
		}
	}
}

func TestSparklineDrawsDeadlineAndPoints(t *testing.T) {
	t0 := time.Now()
	svg := string(sparkline([]history.Point{{T: t0, V: 10}, {T: t0.Add(time.Minute), V: 50}, {T: t0.Add(2 * time.Minute), V: 90}}, 60))
	if !strings.Contains(svg, "<svg") || !strings.Contains(svg, "stroke-dasharray") || strings.Count(svg, ",") != 3 {
		t.Fatalf("sparkline lacks the deadline line or the 3 points: %s", svg)
	}
	if len(svg) > 2048 {
		t.Errorf("sparkline of 3 points is %d bytes", len(svg))
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
