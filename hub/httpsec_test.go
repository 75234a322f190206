package hub

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHTTPTokenTLSAndNoSecretsInLogs runs a hub with an HTTPS API, a read
// token and a password-protected broker, tries wrong tokens and wrong
// passwords, and checks that no secret appears in the log or in a body.
func TestHTTPTokenTLSAndNoSecretsInLogs(t *testing.T) {
	const token, password, wrongToken, wrongPassword = "read-token-0123456789abcdef", "device-password-42", "wrong-token-ZZZZZZZZZZZZ", "wrong-password-99"
	pki := newTestPKI(t)
	var logs lockedBuffer
	o := aggTestOptions(t, t.TempDir())
	o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.HTTPTLSCertFile, o.HTTPTLSKeyFile, o.HTTPReadToken = pki.srvCert, pki.srvKey, token
	o.HTTPReadTimeout, o.HTTPWriteTimeout, o.StreamHeartbeat = time.Second, time.Second, 200*time.Millisecond
	o.MQTTAuthFile = writeCredentials(t, "dev-a", password)
	o.MQTTDenyAnonymous = true
	s := startHub(t, o)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.clientTLS(t, "", "")}, Timeout: 10 * time.Second}
	base := "https://" + s.HTTPAddr()
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var bodies []string
	for _, c := range []struct {
		path, tok string
		want      int
	}{
		{"/healthz", "", 200}, {"/readyz", "", 200},
		{"/v1/devices", "", 401}, {"/v1/devices", wrongToken, 401}, {"/metrics", "", 401},
		{"/v1/devices", token, 200}, {"/metrics", token, 200}, {"/v1/devices/nope", token, 404},
	} {
		code, body := get(c.path, c.tok)
		if code != c.want {
			t.Errorf("GET %s (token %v): %d %s, want %d", c.path, c.tok != "", code, body, c.want)
		}
		bodies = append(bodies, body)
	}
	// Plain HTTP on the TLS port is refused.
	if resp, err := http.Get("http://" + s.HTTPAddr() + "/healthz"); err == nil {
		if resp.StatusCode == 200 {
			t.Error("plain HTTP answered 200 on the HTTPS port")
		}
		resp.Body.Close()
	}
	// Wrong and right broker passwords.
	if _, err := mqttClient(t, "tcp://"+s.BrokerAddr(), "edgeflow-dev-a", "dev-a", wrongPassword, nil, ""); err == nil {
		t.Fatal("wrong password accepted")
	}
	if _, err := mqttClient(t, "tcp://"+s.BrokerAddr(), "edgeflow-dev-a", "dev-a", password, nil, ""); err != nil {
		t.Fatal(err)
	}
	// The server-sent event stream outlives the read and write timeouts.
	req, _ := http.NewRequest("GET", base+"/v1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(resp.Body)
	deadline := time.Now().Add(2500 * time.Millisecond)
	pings := 0
	for time.Now().Before(deadline) && lines.Scan() {
		if strings.HasPrefix(lines.Text(), ": ping") {
			pings++
		}
	}
	resp.Body.Close()
	if time.Now().Before(deadline) {
		t.Fatalf("stream ended after %d pings, before 2.5s (timeouts 1s): %v", pings, lines.Err())
	}
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	all := logs.String() + strings.Join(bodies, "\n")
	for _, secret := range []string{token, password, wrongToken, wrongPassword} {
		if strings.Contains(all, secret) {
			t.Errorf("secret %q appears in a log line or a response body", secret)
		}
	}
	if !strings.Contains(logs.String(), "broker refused a connection") {
		t.Errorf("refused connection not logged:\n%s", logs.String())
	}
}
