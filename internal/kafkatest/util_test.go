package kafkatest

import (
	"encoding/base64"
	"testing"
)

// A cluster id is what kafka-storage format takes: 16 bytes in URL-safe
// base64, and never starting with '-', which its argument parser would
// read as an option (one random id in 64 did, and format failed).
func TestClusterIDIsAFormatArgument(t *testing.T) {
	for i := 0; i < 20000; i++ {
		id := clusterID()
		if id[0] == '-' {
			t.Fatalf("cluster id %q starts with '-'", id)
		}
		b, err := base64.RawURLEncoding.DecodeString(id)
		if err != nil || len(b) != 16 {
			t.Fatalf("cluster id %q: %d bytes, %v; want 16", id, len(b), err)
		}
	}
}
