package main

import (
	"fmt"

	"github.com/spf13/viper"

	"edgeflow/hub/alertout"
	"edgeflow/hub/rules"
)

// isFileOnlyKey reports whether a config file key is one without a flag:
// the aggregate section's keys and the rules, sinks and alert_outputs lists.
func isFileOnlyKey(k string) bool {
	return isAggregateKey(k) || k == "rules" || k == "sinks" || k == "alert_outputs"
}

// rulesFromViper checks the rules: list (docs/RULES.md); an error names
// the rule and the key.
func rulesFromViper(v *viper.Viper) ([]rules.Rule, error) {
	rs, err := rules.Parse(v.Get("rules"))
	if err != nil {
		return nil, fmt.Errorf("config key \"rules\": %w", err)
	}
	return rs, nil
}

// alertOutputsFromViper checks the alert_outputs: list (docs/RULES.md);
// an error names the output and the key.
func alertOutputsFromViper(v *viper.Viper) ([]alertout.Config, error) {
	outs, err := alertout.Parse(v.Get("alert_outputs"))
	if err != nil {
		return nil, err
	}
	if len(outs) > 0 && v.Get("rules") == nil {
		return nil, fmt.Errorf("config key \"alert_outputs\": alert outputs need rules (config key \"rules\")")
	}
	return outs, nil
}
