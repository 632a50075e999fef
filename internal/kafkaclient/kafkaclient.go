// Package kafkaclient builds franz-go clients from the kafka section of the
// configuration: brokers, TLS and SASL. Everything that talks to a broker
// goes through kgo/kadm, so a real cluster and kfake work the same.
//
// Prober reads the first data record at or after given offsets, batched
// into one Fetch per leader broker, for the consumer time lag.
package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// ClientID identifies the exporter to brokers.
const ClientID = "outbox_exporter"

// Opts returns kgo options for a configured cluster. Callers add their own
// (consumer topics, timeouts) after these.
func Opts(k *config.Kafka) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.ClientID(ClientID),
		kgo.DialTimeout(5 * time.Second),
		kgo.RequestTimeoutOverhead(5 * time.Second),
		kgo.RetryTimeout(10 * time.Second),
		kgo.MetadataMinAge(5 * time.Second),
		// The exporter only reads: it pushes no client telemetry
		// (KIP-714) to the brokers it watches. Pushing it costs a few
		// MiB of compression buffers per client as well.
		kgo.DisableClientMetrics(),
	}
	if k.TLS.Enabled {
		tc, err := tlsConfig(k.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.Dialer((&tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: tc}).DialContext))
	}
	if m := mechanism(k.SASL); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// New returns a client for a configured cluster. It does not connect until
// first used, so an exporter starts while its brokers are down.
func New(k *config.Kafka, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := Opts(k)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

func tlsConfig(t config.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in by config
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file %s: no PEM certificates found", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load tls.cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func mechanism(s config.SASL) sasl.Mechanism {
	switch s.Mechanism {
	case "PLAIN":
		return plain.Auth{User: s.Username, Pass: s.Password.Reveal()}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: s.Password.Reveal()}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: s.Password.Reveal()}.AsSha512Mechanism()
	}
	return nil
}
