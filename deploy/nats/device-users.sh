#!/bin/sh
# Writes users.conf for the edgeflow NATS cluster: the hubd entry as it is
# in the users.conf given (everything above the "# Devices" line), then one
# entry per device read from stdin as "device-id bcrypt-hash" lines (blank
# lines and lines starting with '#' skipped). Each device may connect over
# MQTT only, publish only its own batches, status and time requests
# (edge.v1.{token}.batch, .status, .time.req) and receive only its own acks
# and time responses, where token is the device id with each '.' written
# as "//" (NATS' MQTT topic mapping).
#
#   deploy/nats/device-users.sh /etc/nats/users.conf < devices.txt > users.conf.new
#   nats-server -c /etc/nats/nats-server.conf -t     # check, then move it in place
#                                                    # and reload: nats-server --signal reload
#
# A bcrypt hash: `nats server passwd`, or htpasswd -bnBC 11 "" PASSWORD | tr -d ':\n'.
set -eu

if [ $# -ne 1 ] || [ ! -r "$1" ]; then
	echo "usage: $0 CURRENT-users.conf < devices.txt > new-users.conf" >&2
	exit 2
fi
if ! grep -q '^  # Devices' "$1"; then
	echo "$0: $1 has no '  # Devices' line to keep the hubd entry above" >&2
	exit 1
fi
sed '/^  # Devices/,$d' "$1"
echo "  # Devices (device-users.sh writes the entries below this line.)"
line=0
while read -r id hash rest; do
	line=$((line + 1))
	case "$id" in '' | '#'*) continue ;; esac
	if [ -n "$rest" ] || [ -z "$hash" ]; then
		echo "$0: line $line: want \"device-id bcrypt-hash\"" >&2
		exit 1
	fi
	if [ "${#id}" -gt 128 ] || printf '%s' "$id" | grep -q '[^A-Za-z0-9._-]'; then
		echo "$0: line $line: device id \"$id\": want 1..128 letters, digits, '.', '_' or '-'" >&2
		exit 1
	fi
	case "$hash" in
	'$2a$'* | '$2b$'* | '$2y$'*) ;;
	*)
		echo "$0: line $line: device $id: the password must be a bcrypt hash (\$2a\$...)" >&2
		exit 1
		;;
	esac
	token=$(printf '%s' "$id" | sed 's/\./\/\//g')
	cat <<ENTRY
  {
    user: "$id"
    password: "$hash"
    allowed_connection_types: ["MQTT"]
    permissions: {
      publish: { allow: ["edge.v1.$token.batch", "edge.v1.$token.status", "edge.v1.$token.time.req"] }
      subscribe: { allow: ["edge.v1.$token.ack", "edge.v1.$token.time.resp"] }
    }
  }
ENTRY
done
echo "]"
