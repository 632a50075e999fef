package alerts

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// ownLabels are the labels a rule written for one config carries to tell
// it apart from its siblings (the outbox, cluster, job, task or deadline
// it is for); a rule of Generic serves all of them and carries none.
var ownLabels = []string{"outbox", "cluster", "reconcile", "task", "deadline"}

// sayKey names a rule by what it says: its alert, severity and, for the
// burn-rate rules, their windows.
func sayKey(r Rule) string {
	return strings.Join([]string{r.Alert, r.Labels["severity"], r.Labels["long"], r.Labels["short"]}, " ")
}

// wordsOf matches a description written from text: its words as they
// stand, any value in its slots.
func wordsOf(text string) *regexp.Regexp {
	parts := slot.Split(text, -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, "(.*)") + "$")
}

// sayConfigs are the configs whose rules together hold every alert Build
// writes: the example, multi.yml (clusters, share groups, two jobs, a
// cluster label), and the example with change data capture and
// leader_election.
func sayConfigs(t *testing.T) map[string]*config.Config {
	leader := exampleConfig(t)
	leader.LeaderElection = &config.LeaderElection{Database: "main"}
	return map[string]*config.Config{"example": exampleConfig(t), "multi": multiConfig(t), "cdc": cdcConfig(t), "leader": leader}
}

// TestBuildAndGenericSayTheSame: for every alert, the rules Build writes
// for a config and the rules Generic writes for its alerting section say
// the same: severity, labels (but those that tell one config's rules
// apart), summary, runbook, the description's words (its slots may hold
// other facts) and the for: (where the text fixes it). Every alert with
// a text is written by both, and none without one.
func TestBuildAndGenericSayTheSame(t *testing.T) {
	built, generic := map[string]bool{}, map[string]bool{}
	for name, cfg := range sayConfigs(t) {
		bf, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		gf, err := Generic(cfg.Alerting)
		if err != nil {
			t.Fatal(err)
		}
		gen := map[string]Rule{}
		for _, r := range alertRules(gf) {
			gen[sayKey(r)] = r
			generic[r.Alert] = true
		}
		for _, r := range alertRules(bf) {
			built[r.Alert] = true
			g, ok := gen[sayKey(r)]
			if !ok {
				t.Errorf("%s: Build writes %s, Generic does not", name, sayKey(r))
				continue
			}
			compareSays(t, name, r, g)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(alertTexts)) {
		if !built[a] || !generic[a] {
			t.Errorf("alert %s has a text; written by Build: %v, by Generic: %v", a, built[a], generic[a])
		}
	}
	for a := range generic {
		if _, ok := alertTexts[a]; !ok {
			t.Errorf("Generic writes %s, which has no text", a)
		}
	}
}

// compareSays compares what the rule b of Build and the rule g of
// Generic say.
func compareSays(t *testing.T, cfg string, b, g Rule) {
	t.Helper()
	key := cfg + ": " + sayKey(b)
	tx, err := textOf(b.Alert, b.Labels["severity"])
	if err != nil {
		t.Errorf("%s: %v", key, err)
		return
	}
	bl := maps.Clone(b.Labels)
	for _, l := range ownLabels {
		delete(bl, l)
	}
	if !maps.Equal(bl, g.Labels) {
		t.Errorf("%s: labels %v, Generic's %v", key, bl, g.Labels)
	}
	for _, a := range []string{"summary", "runbook_url"} {
		if b.Annotations[a] != g.Annotations[a] {
			t.Errorf("%s: %s %q, Generic's %q", key, a, b.Annotations[a], g.Annotations[a])
		}
	}
	re := wordsOf(tx.description)
	for who, r := range map[string]Rule{"Build": b, "Generic": g} {
		if !re.MatchString(r.Annotations["description"]) {
			t.Errorf("%s: %s's description %q is not its text %q", key, who, r.Annotations["description"], tx.description)
		}
		if strings.Contains(r.Annotations["description"], "[[") {
			t.Errorf("%s: %s's description has a slot left open: %q", key, who, r.Annotations["description"])
		}
	}
	if tx.forDur != "" && (b.For != tx.forDur || g.For != tx.forDur) {
		t.Errorf("%s: for: %s, Generic's %s, its text's %s", key, b.For, g.For, tx.forDur)
	}
}

// alertRules returns the alerting rules of f.
func alertRules(f File) []Rule {
	var out []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// TestAlertTextsFilled: a rule that leaves a slot open, fills one its
// text lacks, or gives a for: its text fixes makes Build fail, naming
// the alert.
func TestAlertTextsFilled(t *testing.T) {
	for _, c := range []struct {
		name string
		s    says
		want string
	}{
		{"OutboxDeadEvents", says{}, "slot labels of its description is not filled"},
		{"OutboxDeadEvents", says{fill: []string{"labels", "", "database", "main"}}, "has no slot database"},
		{"OutboxDeadEvents", says{forDur: "1m", fill: []string{"labels", ""}}, "its for: must come from its text or its rule, once"},
		{"OutboxTaskLeaderless", says{fill: []string{"wait", "5m", "work", "x"}}, "its for: must come from its text or its rule, once"},
		{"OutboxOutOfOrderEvents", says{fill: []string{"labels", ""}}, `no text at severity ""`},
		{"OutboxNoSuchAlert", says{}, "alert OutboxNoSuchAlert has no text"},
	} {
		b := &builder{cfg: &config.Config{}}
		b.alert(c.name, "vector(1)", c.s, nil)
		if b.err == nil || !strings.Contains(b.err.Error(), c.want) || !strings.Contains(b.err.Error(), c.name) {
			t.Errorf("%s %+v: error %v, want one naming the alert and saying %q", c.name, c.s, b.err, c.want)
		}
	}
}
