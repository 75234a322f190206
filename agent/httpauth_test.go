package agent

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

func TestHTTPTokenAndTLS(t *testing.T) {
	const token, wrong = "agent-token-0123456789", "not-the-token-987654"
	var logs bytes.Buffer
	o := testOptions(t)
	o.HTTPToken = token
	o.HTTPTLSCertFile, o.HTTPTLSKeyFile, _ = selfSigned(t)
	o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ta := startAgent(t, o)
	pem, _ := os.ReadFile(o.HTTPTLSCertFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	base := "https://" + ta.HTTPAddr()
	var bodies strings.Builder
	do := func(method, path, tok, body string) int {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		bodies.Write(b)
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, tok string
		want              int
	}{
		{"GET", "/healthz", "", 200},
		{"GET", "/v1/status", "", 401},
		{"GET", "/v1/status", wrong, 401},
		{"POST", "/v1/events", wrong, 401},
		{"GET", "/v1/status", token, 200},
		{"POST", "/v1/events", token, 200},
	} {
		if got := do(c.method, c.path, c.tok, `[{"metric":"m","value":1}]`); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, got, c.want)
		}
	}
	if resp, err := http.Get("http://" + ta.HTTPAddr() + "/healthz"); err == nil {
		if resp.StatusCode == 200 {
			t.Error("plain HTTP answered on the TLS port")
		}
		resp.Body.Close()
	}
	_ = ta.stop()
	for _, secret := range []string{token, wrong} {
		if strings.Contains(logs.String()+bodies.String(), secret) {
			t.Errorf("%q in a log line or a response body", secret)
		}
	}
}

func TestHTTPTokenValidated(t *testing.T) {
	o := testOptions(t)
	o.HTTPToken = "short"
	if _, err := New(o); err == nil || strings.Contains(err.Error(), "short\"") {
		t.Fatalf("got %v", err)
	}
}
