package web

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"testing"
)

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{
		"":                          false,
		"gzip":                      true,
		"GZIP":                      true,
		"identity":                  false,
		"zstd, gzip;q=0.5":          true,
		"gzip;q=0":                  false,
		"gzip; q=0.0, identity":     false,
		"deflate, gzip ; q=1":       true,
		"gzip;q=bad":                false,
		"x-gzip":                    false,
		"br;q=1.0, gzip;q=0.8, *;q": true,
	} {
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", h, got, want)
		}
	}
}

// TestMetricsGzip: a scrape asking for gzip gets a gzip stream holding
// the same series as a scrape that does not (the values of the process's
// own metrics move between two scrapes; the names and labels do not),
// twice, so that a writer taken back from the pool is reset.
func TestMetricsGzip(t *testing.T) {
	s, _ := newTestServer(t, goodConfig)
	h := s.Handler()
	plain := scrapeSeries(t, h, "")
	for i := 0; i < 2; i++ {
		zipped := scrapeSeries(t, h, "gzip")
		if !slices.Equal(plain, zipped) {
			t.Fatalf("gzip scrape %d has series\n%v\nplain\n%v", i, zipped, plain)
		}
	}
	if len(plain) < 10 {
		t.Fatalf("only %d series: nothing compared", len(plain))
	}
}

var seriesName = regexp.MustCompile(`(?m)^([a-z_]+(\{[^}]*\})?) `)

func scrapeSeries(t *testing.T, h http.Handler, enc string) []string {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if enc != "" {
		req.Header.Set("Accept-Encoding", enc)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	var body io.Reader = rec.Body
	if got := rec.Header().Get("Content-Encoding"); got != enc {
		t.Fatalf("Content-Encoding %q, want %q", got, enc)
	}
	if enc == "gzip" {
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range seriesName.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestGzipErrorGoesPlain: an error answer is not compressed, and says
// no Content-Encoding.
func TestGzipErrorGoesPlain(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", "gzip") // as promhttp's error path deletes
		w.Header().Del("Content-Encoding")
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec := httptest.NewRecorder()
	serveCompressed(h, rec, req)
	if rec.Code != 500 || rec.Header().Get("Content-Encoding") != "" || rec.Body.String() != "broken\n" {
		t.Fatalf("error answer: %d %q %q", rec.Code, rec.Header().Get("Content-Encoding"), rec.Body.String())
	}
}
