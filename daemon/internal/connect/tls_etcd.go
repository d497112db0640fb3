package connect

// TLS and authentication to etcd (see tls.go for the shared flags).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdUsesTLS reports whether the etcd client speaks TLS to ep, as clientv3
// decides it: https:// and unixs:// always, http:// and unix:// never, a
// bare host:port when TLS is configured.
func etcdUsesTLS(ep string, configured bool) bool {
	switch {
	case strings.HasPrefix(ep, "https://"), strings.HasPrefix(ep, "unixs:"):
		return true
	case strings.HasPrefix(ep, "http://"), strings.HasPrefix(ep, "unix:"):
		return false
	}
	return configured
}

// etcdClientConfig is the one place an etcd client is configured, for serve
// and every client command: endpoints, dial timeout, TLS and credentials.
func etcdClientConfig(ctx context.Context, endpoints []string, timeout time.Duration, sec Security) (clientv3.Config, error) {
	tlsCfg, err := sec.tlsConfig()
	if err != nil {
		return clientv3.Config{}, err
	}
	if tlsCfg != nil {
		for _, ep := range endpoints {
			if !etcdUsesTLS(ep, true) {
				return clientv3.Config{}, fmt.Errorf("--etcd.endpoints %s: plain http://, but TLS flags are given (%s): write https:// (or host:port)", ep, sec.GivenFlags())
			}
		}
	}
	user, password, err := sec.credentials()
	if err != nil {
		return clientv3.Config{}, err
	}
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: timeout,
		Logger:      zap.NewNop(),
		// The client lives until its Close, not until the context of the
		// dial ends (a member dials under a context of its start only).
		Context:  context.WithoutCancel(ctx),
		TLS:      tlsCfg,
		Username: user,
		Password: password,
	}, nil
}

// etcdHint says what to do about err from etcd ("" when nothing): TLS,
// credentials, or a role that does not cover the prefix.
func etcdHint(err error, user, prefix string) string {
	if h := tlsHint("etcd", "etcd", err); h != "" {
		return h
	}
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return "etcd refused the user name or password: check --etcd.user and its password"
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrInvalidAuthToken):
		return "etcd has authentication enabled: set --etcd.user (or a client certificate whose common name is an etcd user)"
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrUserNotFound):
		who := "this client"
		if user != "" {
			who = "etcd user " + user
		}
		return fmt.Sprintf("%s may not read and write the keys under --etcd.prefix %s/: grant its role readwrite on them (etcdctl role grant-permission ROLE --prefix=true readwrite %s/)", who, prefix, prefix)
	}
	return ""
}

// probeEtcd checks, before the etcd client dials (it retries until its
// deadline and then keeps only "deadline exceeded"), whether the endpoints
// can answer at all. It returns an error when none can: each refuses the
// connection (only when refusedIsFinal: serve may start before etcd does,
// and waits instead) or its TLS handshake fails, naming why and the flag to
// set. It returns nil when any endpoint accepts, does not answer in time (a
// slow network keeps the client's full timeout), or is not a host:port (the
// client reports that).
func probeEtcd(ctx context.Context, endpoints []string, tlsCfg *tls.Config, timeout time.Duration, refusedIsFinal bool) error {
	var refused, rejected []string
	var firstTLS error
	for _, ep := range endpoints {
		err := probeEndpoint(ctx, ep, tlsCfg, timeout)
		var re refusedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &re):
			if !refusedIsFinal {
				return nil
			}
			refused = append(refused, re.hostport)
		default:
			if firstTLS == nil {
				firstTLS = err
			}
			rejected = append(rejected, err.Error())
		}
	}
	if firstTLS != nil {
		msg := strings.Join(append(rejected, refusedText(refused)...), "; ")
		return withHint(errors.New(msg), tlsHint("etcd", "etcd", firstTLS))
	}
	return refusedError{strings.Join(refused, ", ")}
}

func refusedText(hostports []string) []string {
	if len(hostports) == 0 {
		return nil
	}
	return []string{"connection refused by " + strings.Join(hostports, ", ")}
}

type refusedError struct{ hostport string }

func (e refusedError) Error() string { return "connection refused by " + e.hostport }

// probeEndpoint returns nil when ep (an etcd endpoint, or a member's
// https:// URL) accepts (or cannot be judged), a
// refusedError when nothing listens, and the TLS error when the handshake,
// or the first read after it, fails: with TLS 1.3 a server that refuses
// the client's certificate says so only after the client's handshake
// completed. The handshake offers HTTP/2, whose server speaks first (its
// SETTINGS), as etcd's does: only then is the first byte waited for.
func probeEndpoint(ctx context.Context, ep string, tlsCfg *tls.Config, timeout time.Duration) error {
	hostport := ep
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		hostport = u.Host
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return refusedError{hostport}
		}
		return nil
	}
	defer conn.Close()
	if !etcdUsesTLS(ep, tlsCfg != nil) {
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if tlsCfg != nil {
		cfg = tlsCfg.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"h2"}
	_ = conn.SetDeadline(time.Now().Add(min(timeout, 3*time.Second)))
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		if isTimeout(err) || ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("TLS handshake with %s: %w", hostport, err)
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		return nil // not an HTTP/2 server: it would not speak first
	}
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil && !isTimeout(err) && !errors.Is(err, io.EOF) && ctx.Err() == nil {
		return fmt.Errorf("TLS with %s: %w", hostport, err)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
