package hub

import "errors"
import "edgeflow/hub/broker"

// ErrNoCredentialsFile is returned by ReloadCredentials when the hub was
// started without MQTTAuthFile (there is nothing to reload).
var ErrNoCredentialsFile = errors.New("hub: no credentials file (MQTTAuthFile) to reload")

// ReloadCredentials reads MQTTAuthFile again (hubd does on SIGHUP). New
// and changed passwords apply to the next connection; clients connected
// with a password of a device that was removed or whose password changed
// are disconnected, and must verify again to reconnect. A file that does
// not parse leaves the current credentials in force; the error names the
// line, never a hash. It returns how many devices are listed now and how
// many clients were disconnected.
func (s *Server) ReloadCredentials() (devices, disconnected int, err error) {
	if s.opts.MQTTAuthFile == "" || s.brokerSec.Credentials == nil {
		return 0, 0, ErrNoCredentialsFile
	}
	n, err := broker.LoadCredentials(s.opts.MQTTAuthFile)
	if err != nil {
		return s.brokerSec.Credentials.Len(), 0, err
	}
	revoked := s.brokerSec.Credentials.Replace(n)
	if eb, ok := s.tr.(*broker.Embedded); ok {
		disconnected = eb.Revoke(revoked)
	}
	devices = s.brokerSec.Credentials.Len()
	s.log.Info("broker credentials reloaded", "devices", devices, "revoked_devices", len(revoked), "disconnected", disconnected)
	return devices, disconnected, nil
}
