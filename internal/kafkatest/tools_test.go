package kafkatest

import (
	"reflect"
	"testing"
)

// The describe tools' tables as Kafka 4.4.0 prints them: "-" where a
// partition has no committed offset, other lines ignored.
func TestParseLagTable(t *testing.T) {
	out := `
Consumer group 'g' has no active members.

GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
g               events          0          5               30              25              -               -               -
g               events          2          -               7               -               m-1             /127.0.0.1      c
`
	got := parseLagTable(out, "CURRENT-OFFSET")
	want := []LagRow{
		{Group: "g", Topic: "events", Partition: 0, Offset: 5, OffsetOK: true, Lag: 25, LagOK: true},
		{Group: "g", Topic: "events", Partition: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
