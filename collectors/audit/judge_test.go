package audit

import (
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	grace := time.Minute
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name string
		o    Observation
		want Verdict
	}{
		{"published long ago, on topic", Observation{Class: Published, MarkedAt: ago(10 * time.Minute), OnTopic: true, OnTopicAt: ago(10 * time.Minute)}, Consistent},
		{"published long ago, absent: silent loss", Observation{Class: Published, MarkedAt: ago(10 * time.Minute)}, MissingInBroker},
		{"published exactly grace ago, absent", Observation{Class: Published, MarkedAt: ago(grace)}, MissingInBroker},
		{"published inside grace, absent: not judged", Observation{Class: Published, MarkedAt: ago(30 * time.Second)}, NotJudged},
		{"published inside grace, on topic: not judged", Observation{Class: Published, MarkedAt: ago(time.Second), OnTopic: true, OnTopicAt: now}, NotJudged},
		{"published without a mark time: not judged", Observation{Class: Published}, NotJudged},
		{"unpublished, absent", Observation{Class: Unpublished}, Consistent},
		{"unpublished, on topic long ago: lost ack", Observation{Class: Unpublished, OnTopic: true, OnTopicAt: ago(5 * time.Minute)}, UnmarkedInBroker},
		{"unpublished, on topic inside grace: relay about to mark", Observation{Class: Unpublished, OnTopic: true, OnTopicAt: ago(10 * time.Second)}, NotJudged},
		{"dead, on topic: reported", Observation{Class: Dead, OnTopic: true, OnTopicAt: ago(time.Hour)}, DeadInBroker},
		{"dead, on topic just now: reported, dead is final", Observation{Class: Dead, OnTopic: true, OnTopicAt: now}, DeadInBroker},
		{"dead, absent", Observation{Class: Dead}, Consistent},
		{"ignored status, on topic: not judged", Observation{Class: Ignored, OnTopic: true, OnTopicAt: ago(time.Hour)}, NotJudged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Judge(tt.o, now, grace); got != tt.want {
				t.Errorf("Judge = %d, want %d", got, tt.want)
			}
		})
	}
}
