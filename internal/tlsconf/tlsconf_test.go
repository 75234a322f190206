package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePair writes a self-signed certificate and its key as PEM files and
// returns their paths.
func writePair(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "broker.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, DNSNames: []string{"broker.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestConfigReadsFiles(t *testing.T) {
	cert, key := writePair(t)
	c, err := Files{CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "broker.test"}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.MinVersion != tls.VersionTLS12 || c.ServerName != "broker.test" {
		t.Fatalf("min version %x, server name %q", c.MinVersion, c.ServerName)
	}
	if c.RootCAs == nil || len(c.Certificates) != 1 {
		t.Fatalf("root CAs %v, %d client certificates: want the CA file's pool and one certificate", c.RootCAs, len(c.Certificates))
	}
	c, err = Files{}.Config()
	if err != nil || c.RootCAs != nil || c.Certificates != nil {
		t.Fatalf("zero files: %v, %+v: want the system roots and no client certificate", err, c)
	}
}

func TestConfigErrorsNameTheFile(t *testing.T) {
	cert, key := writePair(t)
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		files Files
		want  string
	}{
		{"missing ca", Files{CAFile: "/nonexistent/ca.pem"}, "tls ca file: open /nonexistent/ca.pem"},
		{"ca not pem", Files{CAFile: notPEM}, "tls ca file " + notPEM + " holds no PEM certificate"},
		{"cert without key", Files{CertFile: cert}, "tls client certificate " + cert},
		{"key without cert", Files{KeyFile: key}, "tls client certificate"},
		{"key is not the cert's", Files{CertFile: cert, KeyFile: cert}, "tls client certificate " + cert},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.files.Config()
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %v, want one starting %q", err, c.want)
			}
			if b, _ := os.ReadFile(key); strings.Contains(err.Error(), string(b)) {
				t.Fatal("the error holds the key")
			}
		})
	}
}

func TestEnabledAndScheme(t *testing.T) {
	if (Files{}).Enabled() {
		t.Error("zero Files enabled")
	}
	for _, f := range []Files{{CAFile: "a"}, {CertFile: "a"}, {KeyFile: "a"}, {ServerName: "a"}} {
		if !f.Enabled() {
			t.Errorf("%+v not enabled", f)
		}
	}
	for url, want := range map[string]bool{
		"ssl://h:8883": true, "tls://h:8883": true, "mqtts://h:8883": true, "wss://h:443": true,
		"tcp://h:1883": false, "mqtt://h:1883": false, "ws://h:80": false, "h:8883": false, "": false,
	} {
		if got := Scheme(url); got != want {
			t.Errorf("Scheme(%q) = %v, want %v", url, got, want)
		}
	}
}
