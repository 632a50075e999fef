package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// link is one markdown link: its target and the line it is on.
type link struct {
	target string
	line   int
}

var (
	linkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeRe = regexp.MustCompile("`[^`]*`")
)

// links lists the links of a markdown file outside code blocks and code
// spans.
func links(t *testing.T, path string) []link {
	t.Helper()
	var out []link
	fenced := false
	eachLine(t, path, func(n int, line string) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			return
		}
		if fenced {
			return
		}
		for _, m := range linkRe.FindAllStringSubmatch(codeRe.ReplaceAllString(line, ""), -1) {
			out = append(out, link{target: m[1], line: n})
		}
	})
	return out
}

// resolve says what is wrong with a link from the file from, or "" when
// its file exists and its anchor, if any, is a heading of that file.
// Links to other sites are not followed.
func resolve(from, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	path := from
	if file != "" {
		path = filepath.Join(filepath.Dir(from), file)
		if _, err := os.Stat(path); err != nil {
			return "no such file " + path
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(path, ".md") {
		return "an anchor into a file that is not markdown"
	}
	as, err := anchors(path)
	if err != nil {
		return err.Error()
	}
	if !as[anchor] {
		return "no heading of " + path + " has the anchor #" + anchor
	}
	return ""
}

var slugDrop = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)

// anchors are the anchors GitHub gives the headings of a markdown file:
// lower case, punctuation dropped, spaces as hyphens, and -1, -2 ... after
// a repeated one.
func anchors(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := headingRe.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[2])), ""), " ", "-")
		base := slug
		for i := 1; out[slug]; i++ {
			slug = base + "-" + strconv.Itoa(i)
		}
		out[slug] = true
	}
	return out, nil
}

// TestReadmeShort keeps the README a five-minute read: the reference
// belongs in docs/.
func TestReadmeShort(t *testing.T) {
	const most = 250
	n := 0
	eachLine(t, "../README.md", func(int, string) { n++ })
	if n > most {
		t.Errorf("README.md has %d lines, more than %d: move the detail into docs/ and link it", n, most)
	}
	if n < 20 {
		t.Errorf("README.md has only %d lines", n)
	}
}
