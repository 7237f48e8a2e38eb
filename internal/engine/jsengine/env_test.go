package jsengine_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// TestDialWaitsForAServerThatStarts: Dial retries while no server of the
// list answers yet, as when a cluster is starting.
func TestDialWaitsForAServerThatStarts(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true})
		if err != nil {
			return
		}
		srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	}()
	nc, err := jsengine.Dial(t.Context(), jsengine.Conn{Servers: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}}, "test", nil)
	if err != nil {
		t.Fatalf("dial a server that starts 300 ms later: %v", err)
	}
	nc.Close()
}

// TestDialTLS: a tls:// server with the CA from the binding's tls.ca.
func TestDialTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile, cert := testCerts(t, dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	url := fmt.Sprintf("tls://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port)
	nc, err := jsengine.Dial(t.Context(), jsengine.Conn{Servers: []string{url}, TLS: &jsengine.EnvTLS{CA: caFile}}, "test", nil)
	if err != nil {
		t.Fatalf("dial with the CA: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("connection is not TLS")
	}
	nc.Close()
	if _, err := jsengine.Dial(t.Context(), jsengine.Conn{Servers: []string{url}}, "test", nil); err == nil {
		t.Error("dial without the CA trusted an unknown certificate")
	}
}

// testCerts writes a CA to dir and returns its file and a server
// certificate for 127.0.0.1 signed by it.
func testCerts(t *testing.T, dir string) (string, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
