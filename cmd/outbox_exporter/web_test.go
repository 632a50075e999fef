package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// syncBuffer collects output written from several goroutines.
type syncBuffer = testutil.SyncBuffer

// freeAddr returns a 127.0.0.1 address with a port nobody listens on now.
var freeAddr = testutil.FreeAddr

// selfSigned writes a certificate and key for 127.0.0.1 and returns their
// paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	der, key := testutil.SelfSigned(t, "outbox_exporter test", false)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

const minimalConfig = `
databases:
  main:
    dsn: postgres://exporter:%s@127.0.0.1:1/nowhere?connect_timeout=1
outboxes:
  messages: {database: main, table: public.outbox, id: event_id, created_at: created_at, deadline: 5m}
`

// serveInBackground runs the binary with args (serve) in a goroutine,
// its stderr to stderr. stop cancels it and returns its exit code, or
// false if it did not stop within 10s.
func serveInBackground(args []string, stderr io.Writer) (stop func() (int, bool)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, io.Discard, stderr) }()
	return func() (int, bool) {
		cancel()
		select {
		case code := <-done:
			return code, true
		case <-time.After(10 * time.Second):
			return 0, false
		}
	}
}

// getRetry GETs url until it answers or 10s pass.
func getRetry(client *http.Client, url string) (*http.Response, error) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := client.Get(url)
		if err == nil || time.Now().After(deadline) {
			return resp, err
		}
	}
}

// getAs GETs url with basic auth and returns the status and the body.
func getAs(client *http.Client, url, user, pass string) (int, []byte, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.SetBasicAuth(user, pass)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, body, nil
}

// tlsWebConfig writes a web config (exporter-toolkit's format) serving
// TLS with a self-signed certificate and basic auth for prometheus with
// password, and returns its path and a pool that trusts the certificate.
func tlsWebConfig(t *testing.T, dir, password string) (string, *x509.CertPool) {
	t.Helper()
	certFile, keyFile, pool := selfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	os.WriteFile(webCfg, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n", certFile, keyFile, hash)), 0o600)
	return webCfg, pool
}

// /metrics over TLS with basic auth, through exporter-toolkit's web config.
func TestServeTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	webCfg, pool := tlsWebConfig(t, dir, "s3cret-scrape")
	cfgFile := filepath.Join(dir, "config.yml")
	os.WriteFile(cfgFile, []byte(fmt.Sprintf(minimalConfig, "dbpass")), 0o600)
	addr := freeAddr(t)

	var stderr syncBuffer
	stop := serveInBackground([]string{"--config.file=" + cfgFile, "--web.listen-address=" + addr, "--web.config.file=" + webCfg}, &stderr)
	defer func() {
		if code, ok := stop(); !ok {
			t.Error("serve did not stop within 10s of cancel")
		} else if code != 0 {
			t.Errorf("serve exited %d; stderr:\n%s", code, stderr.String())
		}
	}()

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + addr + "/metrics"
	resp, err := getRetry(client, url)
	if err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, stderr.String())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d, want 401", resp.StatusCode)
	}
	for user, pass := range map[string]string{"prometheus": "wrong", "nobody": "s3cret-scrape"} {
		code, _, err := getAs(client, url, user, pass)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusUnauthorized {
			t.Errorf("%s/%s: %d, want 401", user, pass, code)
		}
	}
	code, body, err := getAs(client, url, "prometheus", "s3cret-scrape")
	if err != nil {
		t.Fatal(err)
	}
	if code != 200 || !strings.Contains(string(body), "outbox_exporter_build_info") {
		t.Fatalf("with credentials: %d\n%.500s", code, body)
	}
	// Plain HTTP is refused on a TLS listener.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP served metrics on the TLS listener")
		}
	}
	if strings.Contains(stderr.String(), "dbpass") {
		t.Errorf("the DSN password reached the log:\n%s", stderr.String())
	}
}
