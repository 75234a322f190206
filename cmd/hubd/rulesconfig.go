package main

import (
	"fmt"

	"github.com/spf13/viper"

	"edgeflow/hub/rules"
)

// isFileOnlyKey reports whether a config file key is one without a flag:
// the aggregate section's keys and the rules and sinks lists.
func isFileOnlyKey(k string) bool { return isAggregateKey(k) || k == "rules" || k == "sinks" }

// rulesFromViper checks the rules: list (docs/RULES.md); an error names
// the rule and the key.
func rulesFromViper(v *viper.Viper) ([]rules.Rule, error) {
	rs, err := rules.Parse(v.Get("rules"))
	if err != nil {
		return nil, fmt.Errorf("config key \"rules\": %w", err)
	}
	return rs, nil
}
