package config

import (
	"fmt"
	"os"
	"reflect"

	"gopkg.in/yaml.v3"
)

var secretType = reflect.TypeOf(Secret(""))

// ParseWithoutSecrets decodes and validates a configuration for a command
// that never connects (generate): a ${VAR} in a secret value (a DSN, a
// SASL password) whose variable is unset stays as written, so the
// dashboards and rules can be built where the secrets are not. An unset
// variable anywhere else is still an error: those values shape the
// output. env nil means os.LookupEnv.
func ParseWithoutSecrets(data []byte, env func(string) (string, bool)) (*Config, error) {
	if env == nil {
		env = os.LookupEnv
	}
	return parse(data, &decoder{lines: map[string]int{}, env: env, secretsUnset: true})
}

// LoadWithoutSecrets reads a configuration file as ParseWithoutSecrets does.
func LoadWithoutSecrets(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := ParseWithoutSecrets(data, nil)
	if err != nil {
		return nil, fmt.Errorf("config file %s:\n%w", path, err)
	}
	return cfg, nil
}

// expandSecret is expand for a secret value: an unset variable is left
// as ${NAME}.
func (d *decoder) expandSecret(path string, n *yaml.Node) string {
	return envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
		if v, ok := d.env(envRef.FindStringSubmatch(m)[1]); ok {
			return v
		}
		return m
	})
}
