package config

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// pastedSecret is what a person might paste under the wrong key: a
// password with the bytes YAML and libpq treat specially. Every
// alphanumeric run in it is unique, so any run found in an error is a
// leak of part of it.
const pastedSecret = `Pw7S3cret/Kx9 'Qz4"Lm2\Hv5@Tn8`

var secretRuns = regexp.MustCompile(`[\p{L}\p{N}]{3,}`).FindAllString(pastedSecret, -1)

// leaf is one scalar value in the fixture and the key path it sits at.
type leaf struct {
	path string
	node *yaml.Node
}

// leaves returns every scalar value under n (never a mapping's key).
func leaves(path string, n *yaml.Node) []leaf {
	switch n.Kind {
	case yaml.DocumentNode:
		return leaves(path, n.Content[0])
	case yaml.MappingNode:
		var out []leaf
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, leaves(join(path, n.Content[i].Value), n.Content[i+1])...)
		}
		return out
	case yaml.SequenceNode:
		var out []leaf
		for _, c := range n.Content {
			out = append(out, leaves(path+"[]", c)...)
		}
		return out
	case yaml.ScalarNode:
		return []leaf{{path, n}}
	}
	return nil
}

// TestSecretUnderAnyKey puts a secret under every key of a configuration
// that uses every key, written in the file and through ${VAR}, and as a
// list item where a scalar is wanted: whatever is refused, the errors name
// the key path and its line and never a byte of the value.
func TestSecretUnderAnyKey(t *testing.T) {
	data, err := os.ReadFile("testdata/every_key.yml")
	if err != nil {
		t.Fatal(err)
	}
	vars := env(map[string]string{"PASTED": pastedSecret})
	if _, err := Parse(data, vars); err != nil {
		t.Fatalf("the fixture itself is refused:\n%v", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	forms := []struct {
		name string
		set  func(n *yaml.Node)
	}{
		{"written", func(n *yaml.Node) {
			*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: pastedSecret}
		}},
		{"from the environment", func(n *yaml.Node) { *n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "${PASTED}"} }},
		{"in a list", func(n *yaml.Node) {
			*n = yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.SingleQuotedStyle, Value: pastedSecret}}}
		}},
	}
	refused := 0
	for _, l := range leaves("", &root) {
		for _, f := range forms {
			keep := *l.node
			f.set(l.node)
			text, err := yaml.Marshal(&root)
			*l.node = keep
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(text, vars)
			if err == nil {
				continue
			}
			refused++
			where := l.path + " (" + f.name + ")"
			for _, run := range secretRuns {
				if strings.Contains(err.Error(), run) {
					t.Errorf("%s: the error quotes the secret's %q:\n%v", where, run, err)
				}
			}
			namesKey(t, where, strings.ReplaceAll(l.path, "[]", ""), err)
		}
	}
	// Most keys refuse a password (numbers, durations, names, columns,
	// references); a handful of free-text keys take it.
	if refused < 80 {
		t.Errorf("only %d of the placements were refused: the test exercised too few error paths", refused)
	}
	t.Logf("%d placements refused, none quoting the secret", refused)
}

// namesKey checks that some error names the key path (a list item's path
// begins with it) and the line it was written on.
func namesKey(t *testing.T, where, path string, err error) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Errorf("%s: the error is %T, not config.Errors: %v", where, err, err)
		return
	}
	for _, e := range errs {
		if strings.HasPrefix(e.Path, path) && e.Line > 0 {
			return
		}
	}
	t.Errorf("%s: no error names the key and its line:\n%v", where, err)
}
