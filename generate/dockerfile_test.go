package generate

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// fromLine is a Dockerfile FROM instruction: the image, an optional
// digest, and an optional stage name.
var fromLine = regexp.MustCompile(`(?m)^FROM\s+(\S+?)(@sha256:([0-9a-f]*))?(\s+AS\s+\S+)?\s*$`)

// TestDockerfilePinsItsBases: every base image of deploy/Dockerfile is
// pinned by a full sha256 digest, so a rebuild takes the same bytes, and
// the Go image's tag names the Go release of go.mod (a digest that moved
// to another release would build with a toolchain the module does not
// declare).
func TestDockerfilePinsItsBases(t *testing.T) {
	raw, err := os.ReadFile("../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`).FindSubmatch(mod)
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	froms := fromLine.FindAllStringSubmatch(string(raw), -1)
	if n := strings.Count(string(raw), "\nFROM "); len(froms) != n || n < 2 {
		t.Fatalf("read %d FROM lines of %d in the Dockerfile (a build stage and the image are expected)", len(froms), n)
	}
	sawGo := false
	for _, f := range froms {
		image, digest := f[1], f[3]
		if len(digest) != 64 {
			t.Errorf("FROM %s is not pinned by a full sha256 digest (got %q)", image, digest)
		}
		if name, tag, ok := strings.Cut(image, ":"); ok && name == "golang" {
			sawGo = true
			if want := string(goLine[1]) + "-"; !strings.HasPrefix(tag, want) {
				t.Errorf("the build image is golang:%s, go.mod says go %s", tag, goLine[1])
			}
		}
	}
	if !sawGo {
		t.Error("no golang build stage found")
	}
}

// TestDockerfileStampsTheBuild: the image's build sets every field of
// outbox_exporter_build_info and --version (version, revision, branch,
// build date) from its build arguments.
func TestDockerfileStampsTheBuild(t *testing.T) {
	raw, err := os.ReadFile("../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"Version=${VERSION}", "Revision=${REVISION}", "Branch=${BRANCH}", "BuildDate=${BUILD_DATE}"} {
		if !strings.Contains(string(raw), "-X github.com/prometheus/common/version."+v) {
			t.Errorf("the Dockerfile's ldflags do not set %s", v)
		}
		arg := strings.TrimSuffix(strings.SplitN(v, "${", 2)[1], "}")
		if !strings.Contains(string(raw), "ARG "+arg+"=") || !strings.Contains(string(raw), "--build-arg "+arg+"=") {
			t.Errorf("the Dockerfile declares or documents no build argument %s", arg)
		}
	}
}
