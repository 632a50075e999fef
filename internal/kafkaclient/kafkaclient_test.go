package kafkaclient

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// selfSigned returns a server certificate for 127.0.0.1 and its PEM.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	der, key := testutil.SelfSigned(t, "kfake", true)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestTLS connects over TLS with the configured CA, and with
// insecure_skip_verify; without the CA the certificate is refused.
func TestTLS(t *testing.T) {
	cert, caPEM := selfSigned(t)
	kc := kafkatest.New(t, 1, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	try := func(tc config.TLS) error {
		cl, err := New(&config.Kafka{Brokers: kc.Brokers(), TLS: tc})
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err = kadm.NewClient(cl).ListTopics(ctx)
		return err
	}
	if err := try(config.TLS{Enabled: true, CAFile: ca}); err != nil {
		t.Fatalf("with ca_file: %v", err)
	}
	if err := try(config.TLS{Enabled: true, InsecureSkipVerify: true}); err != nil {
		t.Fatalf("with insecure_skip_verify: %v", err)
	}
	if err := try(config.TLS{Enabled: true}); err == nil {
		t.Fatal("an unknown CA must be refused")
	}
	if _, err := New(&config.Kafka{Brokers: kc.Brokers(), TLS: config.TLS{Enabled: true, CAFile: filepath.Join(t.TempDir(), "missing.pem")}}); err == nil {
		t.Fatal("a missing ca_file must fail")
	}
}
