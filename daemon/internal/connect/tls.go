package connect

// TLS and authentication of consumerd's three kinds of connections, each
// rule in one place:
//   - etcd (serve and every client command): Security kind "etcd",
//     etcdClientConfig builds the clientv3.Config, probeEtcd says why a
//     connection is refused;
//   - NATS, the WAL and the snapshot store: Security kind "wal",
//     natsSecurity gives the natsconn.Security every connection uses;
//   - HTTP between members and from client commands: HTTPTLS, whose
//     serverConfig the member serves with and whose client every caller of
//     a member uses.
//
// A certificate, key or CA file is read when the command starts, and an
// error names the flag and the file; a server's refusal names the flags
// that would change its mind (tlsHint).

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/spf13/pflag"
)

// Security are the TLS and authentication flags of the connections to
// one backend, kind "etcd" or "wal" (NATS), which prefixes every flag:
// --<kind>.cacert, --<kind>.cert, --<kind>.key (etcdctl's names),
// --<kind>.user name[:password], --<kind>.password-file, the env-only
// CONSUMERD_<KIND>_PASSWORD, and for NATS --wal.creds.
type Security struct {
	kind         string
	CACert       string
	Cert, Key    string
	User         string // name[:password]
	PasswordFile string
	// EnvPassword is CONSUMERD_<KIND>_PASSWORD (an env-only setting: a
	// password on a command line is visible to every user of the host).
	EnvPassword string
	// Creds is a NATS credentials file (kind "wal" only).
	Creds string
}

// backendName is how messages name kind's server.
func backendName(kind string) string {
	if kind == "wal" {
		return "NATS"
	}
	return "etcd"
}

// bind registers s's flags, kind "etcd" or "wal", on fs.
func (s *Security) Bind(fs *pflag.FlagSet, kind string) {
	s.kind = kind
	who := backendName(kind)
	f := func(name string) string { return kind + "." + name }
	fs.StringVar(&s.CACert, f("cacert"), "", "PEM file of the CA certificate(s) that verify "+who+"'s server certificate (default: the system's roots); turns TLS on")
	fs.StringVar(&s.Cert, f("cert"), "", "PEM file of the client certificate to present to "+who+" (with --"+f("key")+"); turns TLS on")
	fs.StringVar(&s.Key, f("key"), "", "PEM file of the private key of --"+f("cert"))
	fs.StringVar(&s.User, f("user"), "", who+" user as name[:password]; the password may instead come from --"+f("password-file")+" or $"+cmdline.EnvName(f("password")))
	fs.StringVar(&s.PasswordFile, f("password-file"), "", "file holding the password of --"+f("user")+" (a trailing newline is dropped)")
	cmdline.BindEnvOnly(fs, &s.EnvPassword, f("password"), "password of --"+f("user")+", from the environment only")
	if kind == "wal" {
		fs.StringVar(&s.Creds, "wal.creds", "", "NATS credentials file (user JWT and NKey seed, as 'nsc generate creds' writes it) for a server in operator mode; not with --wal.user")
	}
}

// given reports whether any TLS or authentication flag is set.
func (s Security) Given() bool {
	return s.CACert != "" || s.Cert != "" || s.Key != "" || s.User != "" || s.PasswordFile != "" || s.EnvPassword != "" || s.Creds != ""
}

// givenFlags names the flags given, for messages.
func (s Security) GivenFlags() string {
	var names []string
	for _, f := range []struct{ name, v string }{{"cacert", s.CACert}, {"cert", s.Cert}, {"key", s.Key}, {"user", s.User},
		{"password-file", s.PasswordFile}, {"creds", s.Creds}} {
		if f.v != "" {
			names = append(names, "--"+s.kind+"."+f.name)
		}
	}
	if s.EnvPassword != "" {
		names = append(names, "$"+cmdline.EnvName(s.kind+".password"))
	}
	return strings.Join(names, ", ")
}

// check is the flags' consistency (no file is read): a certificate needs its
// key, a password needs a user and a user a password, given once (the
// password of --X.user name:password or of --X.password-file, either before
// $CONSUMERD_X_PASSWORD), and NATS takes a user or a creds file, not both.
func (s Security) Check() error {
	if err := pairCheck(s.kind, s.Cert, s.Key); err != nil {
		return err
	}
	userFlag, fileFlag, env := "--"+s.kind+".user", "--"+s.kind+".password-file", "$"+cmdline.EnvName(s.kind+".password")
	if s.User == "" {
		switch {
		case s.PasswordFile != "":
			return fmt.Errorf("%s %s: given without %s (the user name)", fileFlag, s.PasswordFile, userFlag)
		case s.EnvPassword != "":
			return fmt.Errorf("%s is set but %s is not: give the user name too", env, userFlag)
		}
		return nil
	}
	if s.Creds != "" {
		return fmt.Errorf("--wal.creds and %s both authenticate: give one", userFlag)
	}
	name, inline, hasInline := strings.Cut(s.User, ":")
	switch {
	case name == "":
		return fmt.Errorf("%s: empty user name (give name[:password])", userFlag)
	case hasInline && s.PasswordFile != "":
		return fmt.Errorf("%s %s: gives a password, and so does %s %s: give one", userFlag, name, fileFlag, s.PasswordFile)
	case hasInline && inline == "":
		return fmt.Errorf("%s %s: empty password after ':'", userFlag, name)
	case !hasInline && s.PasswordFile == "" && s.EnvPassword == "":
		return fmt.Errorf("%s %s: no password: give %s name:password, %s FILE or %s", userFlag, name, userFlag, fileFlag, env)
	}
	return nil
}

// credentials are the user name and password s gives ("" when no user).
func (s Security) credentials() (user, password string, err error) {
	if err := s.Check(); err != nil {
		return "", "", err
	}
	if s.User == "" {
		return "", "", nil
	}
	name, inline, hasInline := strings.Cut(s.User, ":")
	switch {
	case hasInline:
		return name, inline, nil
	case s.PasswordFile != "":
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return "", "", fmt.Errorf("--%s.password-file: %w", s.kind, err)
		}
		pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if pw == "" {
			return "", "", fmt.Errorf("--%s.password-file %s: empty", s.kind, s.PasswordFile)
		}
		return name, pw, nil
	default:
		return name, s.EnvPassword, nil
	}
}

// tlsConfig is the client TLS configuration the flags give, nil when no TLS
// flag is set.
func (s Security) tlsConfig() (*tls.Config, error) {
	if s.CACert == "" && s.Cert == "" && s.Key == "" {
		return nil, nil
	}
	return clientTLS(s.kind, s.CACert, s.Cert, s.Key)
}

// pairCheck: a certificate and its key come together.
func pairCheck(prefix, cert, key string) error {
	switch {
	case cert != "" && key == "":
		return fmt.Errorf("--%s.cert %s: given without --%s.key (its private key)", prefix, cert, prefix)
	case cert == "" && key != "":
		return fmt.Errorf("--%s.key %s: given without --%s.cert (its certificate)", prefix, key, prefix)
	}
	return nil
}

// clientTLS is a client's TLS configuration: the server verified against
// the CAs of caFile (empty: the system's roots), the certificate of
// certFile/keyFile (empty: none) presented. Flags are --<prefix>.cacert,
// .cert and .key.
func clientTLS(prefix, caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadCAs("--"+prefix+".cacert", caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := loadKeyPair(prefix, certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// loadCAs reads the PEM certificates of file, given as flag.
func loadCAs(flag, file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", flag, file)
	}
	return pool, nil
}

// loadKeyPair reads the certificate of --<prefix>.cert and its private key
// of --<prefix>.key. Errors name the flag and the file: unreadable, not PEM,
// a key that is not the certificate's, an expired certificate.
func loadKeyPair(prefix, certFile, keyFile string) (tls.Certificate, error) {
	if err := pairCheck(prefix, certFile, keyFile); err != nil {
		return tls.Certificate{}, err
	}
	certFlag, keyFlag := "--"+prefix+".cert", "--"+prefix+".key"
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", certFlag, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", keyFlag, err)
	}
	if !hasPEM(certPEM, func(t string) bool { return t == "CERTIFICATE" }) {
		return tls.Certificate{}, fmt.Errorf("%s %s: no PEM certificate in it", certFlag, certFile)
	}
	if !hasPEM(keyPEM, func(t string) bool { return strings.HasSuffix(t, "PRIVATE KEY") }) {
		return tls.Certificate{}, fmt.Errorf("%s %s: no PEM private key in it", keyFlag, keyFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, fmt.Errorf("%s %s: not the private key of the certificate in %s %s: %w", keyFlag, keyFile, certFlag, certFile, err)
		}
		return tls.Certificate{}, fmt.Errorf("%s %s with %s %s: %w", certFlag, certFile, keyFlag, keyFile, err)
	}
	if leaf := cert.Leaf; leaf != nil && time.Now().After(leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("%s %s: the certificate expired at %s", certFlag, certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

// hasPEM reports whether b holds a PEM block of a type ok accepts.
func hasPEM(b []byte, ok func(string) bool) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if ok(blk.Type) {
			return true
		}
	}
}

// tlsHint says what to do about err, a TLS failure talking to who (etcd,
// NATS, a member) whose client flags are --<prefix>.*; "" when err is not
// one.
func tlsHint(who, prefix string, err error) string {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	var op *net.OpError
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Sprintf("%s's certificate is not signed by a CA this client trusts: set --%s.cacert to the CA that signed it", who, prefix)
	case errors.As(err, &hostname):
		return fmt.Sprintf("%s's certificate is not valid for the name this client used: use a name or address among its subject alternative names, or reissue it", who)
	case errors.As(err, &invalid):
		return fmt.Sprintf("%s's certificate is not valid (expired, or not for serving)", who)
	case errors.As(err, &header):
		return fmt.Sprintf("%s does not speak TLS there: drop the --%s.cacert/--%s.cert/--%s.key flags, or enable TLS on it", who, prefix, prefix, prefix)
	case errors.As(err, &op) && op.Op == "remote error",
		strings.Contains(err.Error(), "remote error: tls:"): // NATS and gRPC keep only the text
		return fmt.Sprintf("%s refused this client's TLS certificate, or none was given: set --%s.cert and --%s.key to a certificate signed by a CA %s trusts", who, prefix, prefix, who)
	case strings.Contains(err.Error(), "x509: certificate signed by unknown authority"):
		return fmt.Sprintf("%s's certificate is not signed by a CA this client trusts: set --%s.cacert to the CA that signed it", who, prefix)
	}
	return ""
}

// withHint appends hint to err, if any.
func withHint(err error, hint string) error {
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, hint)
}
