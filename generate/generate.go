// Package generate writes the Grafana dashboards and Prometheus rules made
// for a configuration: the library behind `outbox_exporter generate`.
package generate

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/dashboards"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Paths of the generated files, relative to the output directory.
const (
	DashboardDir       = "dashboards"
	RulesFile          = "rules/outbox.rules.yml"
	PrometheusRuleFile = "kubernetes/prometheusrule.yml"
)

// Files renders every generated file for cfg, keyed by its slash-separated
// path relative to the output directory.
func Files(cfg *config.Config) (map[string][]byte, error) {
	out := map[string][]byte{}
	ds, err := dashboards.All(cfg)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		name := path.Join(DashboardDir, d.Name)
		b, err := dashboards.Marshal(d.Dashboard)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
		out[name] = b
	}
	lint := path.Join(DashboardDir, dashboards.LintFile)
	if out[lint], err = dashboards.LintConfig(ds); err != nil {
		return nil, fmt.Errorf("render %s: %w", lint, err)
	}
	rules, err := alerts.Build(cfg)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", RulesFile, err)
	}
	if out[RulesFile], err = alerts.Marshal(rules); err != nil {
		return nil, fmt.Errorf("render %s: %w", RulesFile, err)
	}
	if out[PrometheusRuleFile], err = alerts.MarshalPrometheusRule(rules, "outbox-exporter"); err != nil {
		return nil, fmt.Errorf("render %s: %w", PrometheusRuleFile, err)
	}
	return out, nil
}

// GenericFiles renders the rules that serve any config (alerts.Generic)
// at the paths Files gives the config's own: the rule file and the
// PrometheusRule. The Helm chart and the kustomize manifests ship these,
// since they cannot know the config a user installs them with. Of a's
// fields, the selector should be empty unless every install sets the job
// label it names.
func GenericFiles(a config.Alerting) (map[string][]byte, error) {
	rules, err := alerts.Generic(a)
	if err != nil {
		return nil, fmt.Errorf("render generic rules: %w", err)
	}
	out := map[string][]byte{}
	if out[RulesFile], err = alerts.Marshal(rules); err != nil {
		return nil, fmt.Errorf("render generic %s: %w", RulesFile, err)
	}
	if out[PrometheusRuleFile], err = alerts.MarshalPrometheusRule(rules, "outbox-exporter"); err != nil {
		return nil, fmt.Errorf("render generic %s: %w", PrometheusRuleFile, err)
	}
	return out, nil
}

// Write renders the dashboards and rules for cfg and writes them under
// outDir, creating it if needed. Every file is rendered and written to a
// temporary directory inside outDir first, then renamed into place, so a
// failure leaves no file half-written and, if it happens before the
// renames, no file changed at all. Errors name the file.
func Write(cfg *config.Config, outDir string) error {
	files, err := Files(cfg)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return WriteFiles(files, outDir)
}

// WriteFiles writes files rendered by Files under outDir, all or nothing
// as Write does.
func WriteFiles(files map[string][]byte, outDir string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("generate: create output directory %s: %w", outDir, err)
	}
	tmp, err := os.MkdirTemp(outDir, ".generate-")
	if err != nil {
		return fmt.Errorf("generate: create temporary directory in %s: %w", outDir, err)
	}
	defer os.RemoveAll(tmp)

	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("generate: write %s: %w", name, err)
		}
		if err := writeFile(p, files[name]); err != nil {
			return fmt.Errorf("generate: write %s: %w", name, err)
		}
	}
	for _, name := range names {
		dst := filepath.Join(outDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("generate: write %s: %w", dst, err)
		}
		if err := os.Rename(filepath.Join(tmp, filepath.FromSlash(name)), dst); err != nil {
			return fmt.Errorf("generate: write %s: %w", dst, err)
		}
	}
	return nil
}

// writeFile writes and syncs a new file, so that the rename that follows
// never exposes a file whose contents are not on disk.
func writeFile(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
