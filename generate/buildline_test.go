package generate

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// buildLine is the build command deploy/README.md documents: the sh block
// after the build-line marker.
var buildLine = regexp.MustCompile("(?s)<!-- build-line -->\\s*```sh\\n(.*?)\\n```")

// TestDocumentedBuildLine runs the build line of deploy/README.md (into a
// temporary directory) and checks that the binary reports the branch, the
// revision and a build date, as outbox_exporter_build_info and --version
// show them.
func TestDocumentedBuildLine(t *testing.T) {
	raw, err := os.ReadFile("../deploy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := buildLine.FindSubmatch(raw)
	if m == nil {
		t.Fatal("deploy/README.md has no build line after <!-- build-line -->")
	}
	line := string(m[1])
	bin := filepath.Join(t.TempDir(), "outbox_exporter")
	if !strings.Contains(line, " -o outbox_exporter ") {
		t.Fatalf("the build line does not write ./outbox_exporter: %s", line)
	}
	cmd := exec.Command("bash", "-ec", strings.Replace(line, " -o outbox_exporter ", " -o "+bin+" ", 1))
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the documented build line fails: %v\n%s", err, out)
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", ".."}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("outbox_exporter --version: %v\n%s", err, out)
	}
	v := string(out)
	for _, want := range []string{"branch: " + git("rev-parse", "--abbrev-ref", "HEAD"), "revision: " + git("rev-parse", "HEAD")} {
		if !strings.Contains(v, want) {
			t.Errorf("--version lacks %q:\n%s", want, v)
		}
	}
	if !regexp.MustCompile(`build date:\s+\d{8}-\d{2}:\d{2}:\d{2}`).MatchString(v) {
		t.Errorf("--version has no build date:\n%s", v)
	}
}
