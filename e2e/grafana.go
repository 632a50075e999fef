package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Target is one query of one panel of a generated dashboard.
type Target struct {
	Dashboard string // file name
	Panel     string // panel title
	RefID     string
	Expr      string
}

// String names the target for a failure message.
func (t Target) String() string {
	return fmt.Sprintf("%s / %q / %s", t.Dashboard, t.Panel, t.RefID)
}

// Variable is one template variable of a dashboard.
type Variable struct {
	Name       string
	Type       string // query, custom, constant, textbox, datasource, interval
	Query      string
	IncludeAll bool
	AllValue   string
	Options    []string // values listed in the dashboard (custom variables)
}

// Dashboard is what the test needs of a generated dashboard.
type Dashboard struct {
	File      string
	Targets   []Target
	Variables []Variable
}

type jsonPanel struct {
	Type    string      `json:"type"`
	Title   string      `json:"title"`
	Panels  []jsonPanel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type jsonDashboard struct {
	Panels     []jsonPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
			Options    []struct {
				Value json.RawMessage `json:"value"`
			} `json:"options"`
		} `json:"list"`
	} `json:"templating"`
}

// ParseDashboard reads the panel targets (rows' panels included) and the
// template variables of a dashboard's JSON.
func ParseDashboard(file string, b []byte) (Dashboard, error) {
	var jd jsonDashboard
	if err := json.Unmarshal(b, &jd); err != nil {
		return Dashboard{}, fmt.Errorf("parse dashboard %s: %w", file, err)
	}
	d := Dashboard{File: file}
	var walk func([]jsonPanel)
	walk = func(ps []jsonPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) != "" {
					d.Targets = append(d.Targets, Target{Dashboard: file, Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
				}
			}
		}
	}
	walk(jd.Panels)
	for _, v := range jd.Templating.List {
		q, err := variableQuery(v.Query)
		if err != nil {
			return Dashboard{}, fmt.Errorf("parse dashboard %s: variable %s: %w", file, v.Name, err)
		}
		vv := Variable{Name: v.Name, Type: v.Type, Query: q, IncludeAll: v.IncludeAll, AllValue: v.AllValue}
		for _, o := range v.Options {
			var s string
			if json.Unmarshal(o.Value, &s) == nil && s != "" && s != "$__all" {
				vv.Options = append(vv.Options, s)
			}
		}
		d.Variables = append(d.Variables, vv)
	}
	return d, nil
}

// variableQuery reads a variable's query, which Grafana stores as a string
// or as an object holding it under "query".
func variableQuery(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var m struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object: %w", err)
	}
	return m.Query, nil
}

// Builtins are Grafana's global variables as the test sets them: the rate
// interval fixed at 1m, the interval at Prometheus's scrape interval.
func Builtins(scrapeInterval string) map[string]string {
	return map[string]string{
		"__rate_interval": "1m",
		"__interval":      scrapeInterval,
		"__range":         "1h",
	}
}

// Values returns the value Grafana gives each variable when "All" is
// chosen: a query or custom variable's allValue, or else the alternation
// of its listed options; a constant or textbox its query; the datasource
// its type. builtins are added. A variable with no such value is an error.
func Values(vars []Variable, builtins map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range builtins {
		out[k] = v
	}
	for _, v := range vars {
		switch v.Type {
		case "datasource":
			out[v.Name] = "prometheus"
		case "constant", "textbox":
			out[v.Name] = v.Query
		case "query", "custom":
			switch {
			case v.IncludeAll && v.AllValue != "":
				out[v.Name] = v.AllValue
			case len(v.Options) > 0:
				opts := append([]string(nil), v.Options...)
				sort.Strings(opts)
				for i, o := range opts {
					opts[i] = regexp.QuoteMeta(o)
				}
				out[v.Name] = "(" + strings.Join(opts, "|") + ")"
			default:
				return nil, fmt.Errorf("variable %s (%s) has no All value and lists no options", v.Name, v.Type)
			}
		default:
			return nil, fmt.Errorf("variable %s: type %q not handled by the test", v.Name, v.Type)
		}
	}
	return out, nil
}

// varRef matches Grafana's three variable syntaxes: $name, ${name} or
// ${name:format}, and [[name]] or [[name:format]].
var varRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\[\[(\w+)(?::\w+)?\]\]|\$(\w+)`)

// Substitute replaces every variable reference in expr with its value. A
// reference to a variable not in values is an error naming it.
func Substitute(expr string, values map[string]string) (string, error) {
	var unknown []string
	out := varRef.ReplaceAllStringFunc(expr, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		v, ok := values[name]
		if !ok {
			unknown = append(unknown, name)
			return m
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("substitute %q: unknown variables %s", expr, strings.Join(unknown, ", "))
	}
	return out, nil
}

// ParseLabelValues splits a label_values variable query into its series
// selector (empty for the one-argument form) and label name.
func ParseLabelValues(q string) (selector, label string, err error) {
	s := strings.TrimSpace(q)
	inner, ok := strings.CutPrefix(s, "label_values(")
	if !ok || !strings.HasSuffix(inner, ")") {
		return "", "", fmt.Errorf("not a label_values query: %q", q)
	}
	inner = strings.TrimSuffix(inner, ")")
	// The label is after the last comma outside braces and quotes.
	depth, inQuote, split := 0, false, -1
	for i := 0; i < len(inner); i++ {
		switch c := inner[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case inQuote:
		case c == '{' || c == '(':
			depth++
		case c == '}' || c == ')':
			depth--
		case c == ',' && depth == 0:
			split = i
		}
	}
	if split < 0 {
		selector, label = "", strings.TrimSpace(inner)
	} else {
		selector, label = strings.TrimSpace(inner[:split]), strings.TrimSpace(inner[split+1:])
	}
	if !regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`).MatchString(label) {
		return "", "", fmt.Errorf("label_values query %q: bad label name %q", q, label)
	}
	return selector, label, nil
}
