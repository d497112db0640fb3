package server

import (
	"net"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/daemon/internal/connect"
)

// TestServeSecurityValidate: serve refuses TLS and auth flags with an
// embedded server, client-certificate checks without TLS, and an http://
// advertised endpoint on a TLS listener.
func TestServeSecurityValidate(t *testing.T) {
	ext := []string{"--etcd.endpoints", "https://10.0.0.1:2379", "--wal.url", "tls://10.0.0.1:4222"}
	for _, tc := range []struct {
		args []string
		want string // "" = valid
	}{
		{append(ext, "--etcd.cacert", "ca.pem", "--etcd.cert", "c.pem", "--etcd.key", "k.pem", "--etcd.user", "consumerd:pw",
			"--wal.cacert", "ca.pem", "--wal.creds", "u.creds", "--http.cert", "h.pem", "--http.key", "hk.pem", "--http.client-ca", "ca.pem",
			"--http.cacert", "ca.pem"), ""},
		{[]string{"--etcd.cacert", "ca.pem", "--wal.url", "nats://x:4222"}, "--etcd.endpoints: --etcd.cacert apply to an external etcd"},
		{[]string{"--etcd.endpoints", "x:2379", "--wal.creds", "u.creds"}, "--wal.url: --wal.creds apply to an external NATS server"},
		{append(ext, "--http.client-ca", "ca.pem"), "--http.client-ca ca.pem: verifying client certificates needs TLS"},
		{append(ext, "--http.cert", "h.pem", "--http.key", "k.pem", "--http.advertise", "http://m1:8080"), `--http.advertise: "http://m1:8080" is http://, but --http.cert serves TLS`},
		{append(ext, "--etcd.user", "consumerd"), "--etcd.user consumerd: no password"},
		{append(ext, "--http.key", "k.pem"), "--http.key k.pem: given without --http.cert"},
	} {
		cfg, err := serveConfigFrom(t, tc.args, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one with %q", tc.args, err, tc.want)
		}
	}
}

func TestAdvertiseURLScheme(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4zero, Port: 8443}
	if got := advertiseURL("", (connect.HTTPTLS{Cert: "c.pem"}).Scheme(), addr, func() (string, error) { return "node7", nil }); got != "https://node7:8443" {
		t.Errorf("advertiseURL with --http.cert = %q, want https://node7:8443", got)
	}
}
