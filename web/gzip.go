package web

import (
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
)

// The /metrics answer is compressed here rather than by promhttp: at
// gzip.BestSpeed (promhttp uses the default level: 6% of a steady
// scrape's CPU at 6,000 series, about three times BestSpeed's), and
// with writers kept across garbage collections (promhttp's sync.Pool
// loses them at every GC, and a new writer allocates about 1 MB of
// tables on the next scrape).
var gzipWriters = make(chan *gzip.Writer, 2)

func getGzip(w http.ResponseWriter) *gzip.Writer {
	select {
	case gz := <-gzipWriters:
		gz.Reset(w)
		return gz
	default:
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
		return gz
	}
}

func putGzip(gz *gzip.Writer) {
	gz.Reset(nil)
	select {
	case gzipWriters <- gz:
	default:
	}
}

// acceptsGzip reports whether an Accept-Encoding header asks for gzip
// (listed, with a q-value other than 0), as Prometheus does.
func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		coding, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
		if !ok {
			return true
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(q), 64)
		return err == nil && v > 0
	}
	return false
}

// gzipResponse compresses a 200 answer; any other status (an error
// page) goes out as it is, without Content-Encoding.
type gzipResponse struct {
	http.ResponseWriter
	gz             *gzip.Writer
	started, plain bool
}

func (w *gzipResponse) WriteHeader(code int) {
	if w.started {
		return
	}
	w.started = true
	if code == http.StatusOK {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Del("Content-Length")
	} else {
		w.plain = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *gzipResponse) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.plain {
		return w.ResponseWriter.Write(b)
	}
	return w.gz.Write(b)
}

// serveCompressed serves h through gzip when r asks for it.
func serveCompressed(h http.Handler, w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept-Encoding")
	if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.ServeHTTP(w, r)
		return
	}
	gz := getGzip(w)
	defer putGzip(gz)
	zw := &gzipResponse{ResponseWriter: w, gz: gz}
	h.ServeHTTP(zw, r)
	if zw.started && !zw.plain {
		_ = gz.Close() // the client went away: nothing to tell it
	}
}
