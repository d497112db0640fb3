package connect

// TLS and authentication to NATS (see tls.go for the shared flags).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/consumerd/consumerd/internal/natsconn"
)

// natsSecurity is the TLS configuration and credentials of every NATS
// connection (natsconn.Options applies them): files are read here, so a
// bad one is named at start.
func (s Security) NATS() (natsconn.Security, error) {
	tlsCfg, err := s.tlsConfig()
	if err != nil {
		return natsconn.Security{}, err
	}
	user, password, err := s.credentials()
	if err != nil {
		return natsconn.Security{}, err
	}
	if s.Creds != "" {
		if err := checkCreds(s.Creds); err != nil {
			return natsconn.Security{}, err
		}
	}
	return natsconn.Security{TLS: tlsCfg, User: user, Password: password, CredsFile: s.Creds}, nil
}

// checkCreds reads a NATS credentials file: a user JWT and a user NKey seed.
func checkCreds(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--wal.creds: %w", err)
	}
	jwt, err := nkeys.ParseDecoratedJWT(b)
	if err != nil || strings.Count(jwt, ".") != 2 || bytes.Equal([]byte(jwt), b) {
		return fmt.Errorf("--wal.creds %s: no user JWT in it (a .creds file holds '-----BEGIN NATS USER JWT-----' and a user NKey seed)", file)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("--wal.creds %s: no user NKey seed in it: %w", file, err)
	}
	kp.Wipe()
	return nil
}

// natsHint says what to do about err from NATS ("" when nothing).
func natsHint(err error) string {
	if h := tlsHint("NATS", "wal", err); h != "" {
		return h
	}
	switch {
	case errors.Is(err, nats.ErrTLS) && strings.Contains(err.Error(), "closed by remote after TLS handshake"):
		// With TLS 1.3 a server refusing the client's certificate closes
		// the connection after the client's handshake completed.
		return "NATS refused this client's TLS certificate, or none was given: set --wal.cert and --wal.key to a certificate signed by a CA NATS trusts"
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return "NATS refused the credentials: check --wal.creds, or --wal.user and its password"
	case errors.Is(err, nats.ErrSecureConnRequired):
		return "NATS requires TLS: set --wal.cacert (and --wal.cert/--wal.key if it verifies clients)"
	case errors.Is(err, nats.ErrSecureConnWanted):
		return "NATS does not speak TLS: drop --wal.cacert, --wal.cert and --wal.key"
	}
	return ""
}
