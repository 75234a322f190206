package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"edgeflow/hub"
	"edgeflow/hub/broker"
	"edgeflow/internal/confval"
)

// addSecurityFlags declares the keys of the embedded broker's
// authentication, the HTTP API's TLS and token, and the per-device limits
// (docs/SECURITY.md).
func addSecurityFlags(fs *pflag.FlagSet) {
	fs.String("mqtt-password-file", "", "file holding the password for the external broker (instead of mqtt-password)")
	fs.String("mqtt-ca-file", "", "external broker: PEM CA bundle for its certificate; any mqtt-ca/cert/key-file or mqtt-server-name turns TLS on")
	fs.String("mqtt-cert-file", "", "external broker: PEM client certificate of the hub for mutual TLS (with mqtt-key-file)")
	fs.String("mqtt-key-file", "", "external broker: PEM client key of the hub")
	fs.String("mqtt-server-name", "", "external broker: name checked against its certificate (default: the host of mqtt-url)")
	fs.String("mqtt-auth-file", "", "embedded broker: credentials file of device-id:bcrypt-hash lines (hubd passwd)")
	fs.String("mqtt-tls-cert", "", "embedded broker: TLS certificate (PEM); with mqtt-tls-key the listener is TLS")
	fs.String("mqtt-tls-key", "", "embedded broker: TLS private key (PEM)")
	fs.String("mqtt-tls-client-ca", "", "embedded broker: CA certificates (PEM) of device certificates; CN = device id")
	fs.Bool("mqtt-allow-anonymous", true, "embedded broker: accept clients without credentials, unrestricted (production: false)")
	fs.Int("mqtt-max-conns-per-device", 4, "embedded broker: open connections per verified device (-1: no bound)")
	fs.Int("mqtt-max-retained-bytes", broker.DefaultMaxRetainedBytes, "embedded broker: largest retained message (only a device's status is retained; others are delivered unretained)")
	fs.Int("mqtt-auth-client-failures", 3, "embedded broker: failed password checks a client id may make from one source before it is refused for a doubling backoff (up to 1m)")
	fs.Int("mqtt-auth-source-failures", 20, "embedded broker: failed password checks one source address may make, whatever the client ids, before it is refused for a doubling backoff (raise for fleets behind one NAT)")
	fs.Float64("max-events-per-second", 0, "per-device sustained event rate; batches beyond it are answered retry-later (rate_limited) and resent by the agent (0: no limit)")
	fs.Float64("events-burst", 0, "per-device burst in events (0: one second of max-events-per-second)")
	fs.Int("max-streams-per-device", 16, "streams (agent buffer incarnations) one device may hold, 1 to 65536; a batch opening one more is answered retry-later (too_many_streams)")
	fs.String("stream-idle-expiry", "168h", "a stream with no batch for this long (at least 1h) is retired, so the device may open a new one")
	fs.String("http-tls-cert", "", "HTTP API TLS certificate (PEM); with http-tls-key the API is HTTPS")
	fs.String("http-tls-key", "", "HTTP API TLS private key (PEM)")
	fs.String("http-read-token", "", "bearer token required by every HTTP endpoint but /healthz and /readyz (prefer http-read-token-file or HUBD_HTTP_READ_TOKEN)")
	fs.String("http-read-token-file", "", "file holding the HTTP bearer token")
	fs.String("http-write-token", "", "bearer token that device attribute writes (PUT /v1/devices/{id}/attributes, POST /v1/attributes/bulk) must carry, distinct from http-read-token; empty refuses writes (prefer http-write-token-file or HUBD_HTTP_WRITE_TOKEN)")
	fs.String("http-write-token-file", "", "file holding the HTTP write token")
}

// securityFromViper reads the security keys into o.
func securityFromViper(v *viper.Viper, o *hub.Options) error {
	k := &confval.Keys{Get: v.Get}
	o.MQTTAuthFile = v.GetString("mqtt-auth-file")
	o.MQTTCAFile, o.MQTTCertFile = v.GetString("mqtt-ca-file"), v.GetString("mqtt-cert-file")
	o.MQTTKeyFile, o.MQTTServerName = v.GetString("mqtt-key-file"), v.GetString("mqtt-server-name")
	o.MQTTTLSCertFile, o.MQTTTLSKeyFile = v.GetString("mqtt-tls-cert"), v.GetString("mqtt-tls-key")
	o.MQTTTLSClientCAFile = v.GetString("mqtt-tls-client-ca")
	o.HTTPTLSCertFile, o.HTTPTLSKeyFile = v.GetString("http-tls-cert"), v.GetString("http-tls-key")
	o.MQTTDenyAnonymous = !k.Bool("mqtt-allow-anonymous")
	if n, err := cast.ToIntE(v.Get("mqtt-max-conns-per-device")); err != nil || n < -1 || n == 0 {
		k.Fail("mqtt-max-conns-per-device", "%q is not -1 or a positive integer", k.String("mqtt-max-conns-per-device"))
	} else {
		o.MQTTMaxConnsPerDevice = n
	}
	o.MQTTMaxRetainedBytes = k.Int("mqtt-max-retained-bytes", 1)
	o.MQTTAuthThrottle.ClientFailures = k.Int("mqtt-auth-client-failures", 1)
	o.MQTTAuthThrottle.SourceFailures = k.Int("mqtt-auth-source-failures", 1)
	o.MaxEventsPerSecond, o.EventsBurst = k.Float("max-events-per-second"), k.Float("events-burst")
	o.MaxStreamsPerDevice = k.Int("max-streams-per-device", 1)
	o.StreamIdleExpiry = k.Duration("stream-idle-expiry", false)
	var err error
	if o.HTTPReadToken, err = secret(v, "http-read-token"); err != nil {
		k.Add(err)
	}
	if o.HTTPWriteToken, err = secret(v, "http-write-token"); err != nil {
		k.Add(err)
	}
	if pw, err := secret(v, "mqtt-password"); err != nil {
		k.Add(err)
	} else {
		o.Password = pw
	}
	return k.Err()
}

// reloadOnHUP reloads the embedded broker's credentials file on every
// signal from hup until ctx ends (docs/SECURITY.md).
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, srv *hub.Server, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			devices, dropped, err := srv.ReloadCredentials()
			if err != nil {
				log.Error("SIGHUP: credentials not reloaded; the previous ones stay in force", "err", err)
				continue
			}
			log.Info("SIGHUP: credentials reloaded", "devices", devices, "disconnected", dropped)
		}
	}
}

// secret reads key, or the file named by key-file. Errors name the key and
// the file, never the secret.
func secret(v *viper.Viper, key string) (string, error) {
	val, file := v.GetString(key), v.GetString(key+"-file")
	if file == "" {
		return val, nil
	}
	if val != "" {
		return "", fmt.Errorf("config keys %q and %q: set one of them", key, key+"-file")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("config key %q: %w", key+"-file", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// runPasswd is `hubd passwd [--file F] [--cost N] DEVICE`: it reads the
// password from the first line of stdin (so it is in no argv or shell
// history) and prints the credentials line, or sets it in F.
func runPasswd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("hubd passwd", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("file", "", "credentials file to add the device to or update (created 0600 if missing)")
	cost := fs.Int("cost", 0, "bcrypt cost (0: the default, 10)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hubd passwd [--file FILE] [--cost N] DEVICE-ID < password")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	device := fs.Arg(0)
	pw, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintf(stderr, "hubd passwd: reading the password from stdin: %v\n", err)
		return 1
	}
	line, err := broker.HashPassword(device, []byte(strings.TrimRight(pw, "\r\n")), *cost)
	if err != nil {
		fmt.Fprintf(stderr, "hubd passwd: %v\n", err)
		return 2
	}
	if *file == "" {
		fmt.Fprintln(stdout, line)
		return 0
	}
	if err := setCredential(*file, device, line); err != nil {
		fmt.Fprintf(stderr, "hubd passwd: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "hubd passwd: %s set in %s\n", device, *file)
	return 0
}

// setCredential rewrites file with device's line, atomically (0600).
func setCredential(file, device, line string) error {
	old, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".passwd-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(broker.SetCredentialLine(old, device, line)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
