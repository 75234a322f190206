package hub

import (
	"edgeflow/hub/lease"
	"edgeflow/hub/natsbus"
)

// busOptions are the cluster transport's options.
func (o *Options) busOptions() natsbus.Options {
	return o.NATS.BusOptions(o.ClientID, o.PublishTimeout, o.Logger)
}

// validateNATS checks cluster mode's options, naming fields NATS.*: what
// cluster mode excludes among the hub's options here, the rest in
// cluster.Options.Validate.
func (o *Options) validateNATS(bad func(field, format string, args ...any) error) error {
	if o.NATS.Enabled() {
		switch {
		case o.MQTTURL != "":
			return bad("NATS.URLs", "cluster mode (NATS.URLs) and an external MQTT broker (MQTTURL) exclude each other: devices connect to the NATS servers' MQTT listeners")
		case o.Group != "":
			return bad("Group", "shared subscriptions are for an external MQTT broker, not cluster mode (NATS.URLs)")
		case o.MQTTAuthFile != "" || o.MQTTTLSCertFile != "" || o.MQTTDenyAnonymous:
			return bad("MQTTAuthFile", "the embedded broker's authentication and TLS do not apply in cluster mode (NATS.URLs): the NATS servers authenticate devices")
		}
	}
	if o.NATS.Enabled() {
		// Each hub of a cluster holds only the state of the partitions it
		// owns, and that state moves between hubs through checkpoints the
		// rules' and sinks' positions are not part of: a rule or sink would
		// see part of the fleet and lose what a takeover moved.
		switch {
		case len(o.Rules) > 0:
			return bad("Rules", "rules do not run in cluster mode (NATS.URLs): each hub holds only its partitions' state; run them on a single hub")
		case len(o.AlertOutputs) > 0:
			return bad("AlertOutputs", "alert outputs need rules, which do not run in cluster mode (NATS.URLs)")
		case len(o.Sinks) > 0:
			return bad("Sinks", "sinks do not run in cluster mode (NATS.URLs): each hub holds only its partitions' state, and a takeover does not move a sink's position; run them on a single hub")
		}
	}
	if o.HTTPAdvertiseURL != "" {
		if err := lease.CheckURL(o.HTTPAdvertiseURL); err != nil {
			return bad("HTTPAdvertiseURL", "%v", err)
		}
	}
	if o.HubID != "" && !validHubID(o.HubID) {
		return bad("HubID", "%q: want 1..64 letters, digits, '-' or '_'", o.HubID)
	}
	return o.NATS.Validate(bad)
}
