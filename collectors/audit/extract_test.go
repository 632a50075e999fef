package audit

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestExtractorID(t *testing.T) {
	hdr := func(k, v string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: "trace", Value: []byte("x")}, {Key: k, Value: []byte(v)}}
	}
	tests := []struct {
		spec    string
		rec     kgo.Record
		want    string
		wantErr error
	}{
		{"key", kgo.Record{Key: []byte("evt-1")}, "evt-1", nil},
		{"key", kgo.Record{}, "", ErrNoKey},
		{"key", kgo.Record{Key: []byte{}}, "", ErrEmptyID},
		{"header:event_id", kgo.Record{Headers: hdr("event_id", "evt-2")}, "evt-2", nil},
		{"header:event_id", kgo.Record{Headers: hdr("other", "evt-2")}, "", ErrNoHeader},
		{"header:event_id", kgo.Record{Headers: hdr("event_id", "")}, "", ErrEmptyID},
		{"json:id", kgo.Record{Value: []byte(`{"id":"evt-3","body":"secret"}`)}, "evt-3", nil},
		{"json:id", kgo.Record{Value: []byte(` { "a" : {"id":"nested","x":[1,"}",{"y":null}]}, "b": "q\"uote", "n": -1.5e3, "t": true, "id" : 42 } `)}, "42", nil},
		{"json:id", kgo.Record{Value: []byte(`{"id":"caf\u00e9"}`)}, "café", nil},
		{"json:id", kgo.Record{Value: []byte(`{"i\u0064":"escaped-key"}`)}, "escaped-key", nil},
		{"json:id", kgo.Record{Value: []byte(`{"ids":"no","xid":"no"}`)}, "", ErrNoField},
		{"json:id", kgo.Record{Value: []byte(`not json`)}, "", ErrBadJSON},
		{"json:id", kgo.Record{Value: []byte(`["id","evt"]`)}, "", ErrBadJSON},
		{"json:id", kgo.Record{Value: []byte(`{"id":`)}, "", ErrBadJSON},
		{"json:id", kgo.Record{Value: []byte(`{"a":"unterminated`)}, "", ErrBadJSON},
		{"json:id", kgo.Record{Value: []byte(`{"a" 1}`)}, "", ErrBadJSON},
		{"json:id", kgo.Record{Value: []byte(`{"a":1 "id":"x"}`)}, "", ErrBadJSON},
		{"json:id", kgo.Record{Value: []byte(`{"id":{"v":1}}`)}, "", ErrBadIDValue},
		{"json:id", kgo.Record{Value: []byte(`{"id":null}`)}, "", ErrBadIDValue},
		{"json:id", kgo.Record{Value: []byte(`{"id":""}`)}, "", ErrEmptyID},
		{"json:id", kgo.Record{}, "", ErrBadJSON},
	}
	for _, tt := range tests {
		t.Run(tt.spec+" "+string(tt.rec.Value)+string(tt.rec.Key), func(t *testing.T) {
			e, err := ParseEventID(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.ID(&tt.rec)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("id = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseEventIDRejects(t *testing.T) {
	for _, s := range []string{"", "header:", "json:", "value", "keys"} {
		if _, err := ParseEventID(s); err == nil {
			t.Errorf("ParseEventID(%q) accepted", s)
		}
	}
}

func BenchmarkJSONField(b *testing.B) {
	v := []byte(`{"type":"order.paid","tenant":"t-1","payload":{"amount":100,"items":[1,2,3],"note":"hello"},"event_id":"0b7e7c9a-6a4f-4c61-9d0b-51f9a0c3c6e1"}`)
	for b.Loop() {
		if _, err := jsonField(v, "event_id"); err != nil {
			b.Fatal(err)
		}
	}
}
