// Package tlstest makes certificate authorities and certificates for tests:
// ECDSA P-256 keys, PEM files in a test directory, certificates valid for
// 127.0.0.1, ::1 and localhost.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	// File is the CA certificate's PEM file.
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// Usage says what a certificate is for.
type Usage int

const (
	// Server certificates authenticate a server (ExtKeyUsageServerAuth).
	Server Usage = 1 << iota
	// Client certificates authenticate a client (ExtKeyUsageClientAuth).
	Client
)

var serial atomic.Int64

// NewCA makes a CA named name, its certificate written to a fresh
// directory under tb.TempDir().
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("tlstest: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(tb.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: dir, File: filepath.Join(dir, "ca.pem")}
	writePEM(tb, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate with common name cn for usage, valid for
// 127.0.0.1, ::1 and localhost, and returns its PEM certificate and key
// files.
func (ca *CA) Issue(tb testing.TB, cn string, usage Usage) (certFile, keyFile string) {
	tb.Helper()
	return ca.issue(tb, cn, usage, time.Now().Add(24*time.Hour))
}

// IssueExpired is Issue with a certificate that expired an hour ago.
func (ca *CA) IssueExpired(tb testing.TB, cn string, usage Usage) (certFile, keyFile string) {
	tb.Helper()
	return ca.issue(tb, cn, usage, time.Now().Add(-time.Hour))
}

func (ca *CA) issue(tb testing.TB, cn string, usage Usage, notAfter time.Time) (certFile, keyFile string) {
	tb.Helper()
	key := newKey(tb)
	var ext []x509.ExtKeyUsage
	if usage&Server != 0 {
		ext = append(ext, x509.ExtKeyUsageServerAuth)
	}
	if usage&Client != 0 {
		ext = append(ext, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-2 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  ext,
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("tlstest: certificate %s: %v", cn, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, cn+".pem"), filepath.Join(ca.dir, cn+"-key.pem")
	writePEM(tb, certFile, "CERTIFICATE", der)
	writePEM(tb, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func nextSerial() *big.Int { return big.NewInt(time.Now().UnixNano() + serial.Add(1)) }

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
