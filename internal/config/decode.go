package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Error is one problem in the configuration file, at a key path and line.
type Error struct {
	Path string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: %s (line %d)", e.Path, e.Msg, e.Line)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Msg)
}

// Errors is every problem found in one configuration file.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// decoder walks a yaml.Node tree into Go values by reflection, so that
// every error can name its key path and line, and all of them are kept.
// yaml.v3's own KnownFields only works on a whole Decoder and stops at the
// first error.
type decoder struct {
	errs  Errors
	lines map[string]int
	env   func(string) (string, bool)
	// secretsUnset keeps ${VAR} of an unset variable as written in secret
	// values (DSNs, passwords) instead of failing: see ParseWithoutSecrets.
	secretsUnset bool
}

func (d *decoder) fail(path string, line int, format string, args ...any) {
	d.errs = append(d.errs, &Error{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	labelsType   = reflect.TypeOf([]Label(nil))
	envRef       = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// expand replaces ${VAR} from the environment; an unset variable is an error.
func (d *decoder) expand(path string, n *yaml.Node) string {
	return envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
		name := envRef.FindStringSubmatch(m)[1]
		v, ok := d.env(name)
		if !ok {
			d.fail(path, n.Line, "environment variable %s is not set", name)
		}
		return v
	})
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return scalarKind(n)
	case yaml.AliasNode:
		return "an alias"
	}
	return "empty"
}

// scalarKind names what a scalar is by its YAML type, never by its value:
// a secret pasted under the wrong key must not reach an error message.
func scalarKind(n *yaml.Node) string {
	switch n.ShortTag() {
	case "!!int":
		return "a whole number"
	case "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	case "!!timestamp":
		return "a date"
	case "!!binary":
		return "binary data"
	}
	return "a string"
}

func (d *decoder) decode(path string, n *yaml.Node, v reflect.Value) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // keep the zero value / default
	}
	switch {
	case v.Type() == labelsType:
		d.decodeLabels(path, n, v)
		return
	case v.Type() == durationType:
		d.decodeDuration(path, n, v)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(path, n, v.Elem())
	case reflect.Struct:
		d.decodeStruct(path, n, v)
	case reflect.Map:
		d.decodeMap(path, n, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(path, n.Line, "expected a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(fmt.Sprintf("%s[%d]", path, i), item, s.Index(i))
		}
		v.Set(s)
	case reflect.String, reflect.Bool, reflect.Int, reflect.Float64:
		d.decodeScalar(path, n, v)
	default:
		d.fail(path, n.Line, "cannot decode into %s", v.Type())
	}
}

// decodeDuration reads a Go duration ("90s", "5m"); a negative one is an
// error.
func (d *decoder) decodeDuration(path string, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, n.Line, "%s is not a duration", kindName(n))
		return
	}
	s := d.expand(path, n)
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.fail(path, n.Line, "is not a duration (e.g. 90s, 5m), got %s", scalarKind(n))
		return
	}
	if dur < 0 {
		d.fail(path, n.Line, "is negative")
		return
	}
	v.SetInt(int64(dur))
}

// decodeStruct reads a mapping into a struct by its yaml tags; a key the
// struct does not have, or one given twice, is an error naming it.
func (d *decoder) decodeStruct(path string, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, n.Line, "expected a mapping, got %s", kindName(n))
		return
	}
	fields := map[string]int{}
	for i := 0; i < v.NumField(); i++ {
		tag := strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0]
		if tag != "" && tag != "-" {
			fields[tag] = i
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if seen[k.Value] {
			d.fail(p, k.Line, "key given twice")
			continue
		}
		seen[k.Value] = true
		idx, ok := fields[k.Value]
		if !ok {
			d.fail(p, k.Line, "unknown key")
			continue
		}
		d.lines[p] = k.Line
		d.decode(p, val, v.Field(idx))
	}
}

// decodeMap reads a mapping of named entries (outboxes.NAME, ...).
func (d *decoder) decodeMap(path string, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, n.Line, "expected a mapping, got %s", kindName(n))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if v.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
			d.fail(p, k.Line, "key given twice")
			continue
		}
		d.lines[p] = k.Line
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(p, val, elem)
		if elem.Kind() == reflect.Pointer && elem.IsNil() {
			// "name:" with nothing under it: an empty entry, so that
			// validation names each missing key.
			elem.Set(reflect.New(elem.Type().Elem()))
		}
		v.SetMapIndex(reflect.ValueOf(k.Value), elem)
	}
}

// decodeScalar reads a string, boolean, whole number or number, with
// ${VAR} expanded.
func (d *decoder) decodeScalar(path string, n *yaml.Node, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(path, n.Line, "expected a string, got %s", kindName(n))
			return
		}
		if d.secretsUnset && v.Type() == secretType {
			v.SetString(d.expandSecret(path, n))
			return
		}
		v.SetString(d.expand(path, n))
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode {
			d.fail(path, n.Line, "expected true or false, got %s", kindName(n))
			return
		}
		b, err := strconv.ParseBool(d.expand(path, n))
		if err != nil {
			d.fail(path, n.Line, "expected true or false, got %s", scalarKind(n))
			return
		}
		v.SetBool(b)
	case reflect.Int:
		if n.Kind != yaml.ScalarNode {
			d.fail(path, n.Line, "expected a whole number, got %s", kindName(n))
			return
		}
		i, err := strconv.Atoi(d.expand(path, n))
		if err != nil {
			d.fail(path, n.Line, "expected a whole number, got %s", scalarKind(n))
			return
		}
		v.SetInt(int64(i))
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode {
			d.fail(path, n.Line, "expected a number, got %s", kindName(n))
			return
		}
		f, err := strconv.ParseFloat(d.expand(path, n), 64)
		if err != nil {
			d.fail(path, n.Line, "expected a number, got %s", scalarKind(n))
			return
		}
		v.SetFloat(f)
	}
}

// decodeLabels keeps the order of a labels mapping: the first label selects
// per-label deadlines.
func (d *decoder) decodeLabels(path string, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, n.Line, "expected a mapping of label name to column, got %s", kindName(n))
		return
	}
	var labels []Label
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		d.lines[p] = k.Line
		if seen[k.Value] {
			d.fail(p, k.Line, "key given twice")
			continue
		}
		seen[k.Value] = true
		if val.Kind != yaml.ScalarNode {
			d.fail(p, val.Line, "expected a column name, got %s", kindName(val))
			continue
		}
		labels = append(labels, Label{Name: k.Value, Column: d.expand(p, val)})
	}
	v.Set(reflect.ValueOf(labels))
}

// Parse decodes and validates a configuration file's bytes. env looks up
// ${VAR} references; nil means os.LookupEnv.
func Parse(data []byte, env func(string) (string, bool)) (*Config, error) {
	if env == nil {
		env = os.LookupEnv
	}
	return parse(data, &decoder{lines: map[string]int{}, env: env})
}

// parse decodes and validates data with d.
func parse(data []byte, d *decoder) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	cfg := &Config{}
	if len(root.Content) > 0 {
		d.decode("", root.Content[0], reflect.ValueOf(cfg).Elem())
	}
	cfg.lines = d.lines
	cfg.secretsLeft = d.secretsUnset
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	cfg.applyPresets()
	cfg.renameReservedLabels()
	cfg.setDefaults()
	if errs := cfg.validate(); len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// Load reads, decodes and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(data, nil)
	if err != nil {
		return nil, fmt.Errorf("config file %s:\n%w", path, err)
	}
	return cfg, nil
}
