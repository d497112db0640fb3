package connect

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/tlstest"
)

// clientSecurityFrom parses a client command's flags from args and env, as
// the command line does (flags, then their environment mirrors).
func clientSecurityFrom(t *testing.T, args []string, env map[string]string) (ClientFlags, error) {
	t.Helper()
	var cf ClientFlags
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	cf.Bind(cmd.Flags())
	if err := cmd.ParseFlags(args); err != nil {
		return cf, err
	}
	err := cmdline.ApplyEnv(cmd, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return cf, err
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCredentials: --X.user name[:password], --X.password-file and
// $CONSUMERD_X_PASSWORD give one user and password, the inline or file
// password before the environment's; contradictions and gaps are errors
// naming the flags (and never the password); the password variable is
// refused as a command-line flag.
func TestCredentials(t *testing.T) {
	pwFile := writeTemp(t, "pw", "from-file\n")
	crlfFile := writeTemp(t, "pw-crlf", "from-file\r\n")
	emptyFile := writeTemp(t, "empty", "\n")
	missing := filepath.Join(t.TempDir(), "no-such-file")
	creds := writeTemp(t, "user.creds", "x")
	cases := []struct {
		name             string
		args             []string
		env              map[string]string
		kind             string // "etcd" (default) or "wal"
		wantUser, wantPW string
		wantErr          []string // all in the error
	}{
		{name: "none"},
		{name: "inline", args: []string{"--etcd.user", "alice:s3:cret"}, wantUser: "alice", wantPW: "s3:cret"},
		{name: "env password", args: []string{"--etcd.user", "alice"}, env: map[string]string{"CONSUMERD_ETCD_PASSWORD": "from-env"}, wantUser: "alice", wantPW: "from-env"},
		{name: "password file, newline dropped", args: []string{"--etcd.user", "alice", "--etcd.password-file", pwFile}, wantUser: "alice", wantPW: "from-file"},
		{name: "password file, CRLF dropped", args: []string{"--etcd.user", "alice", "--etcd.password-file", crlfFile}, wantUser: "alice", wantPW: "from-file"},
		{name: "inline before env", args: []string{"--etcd.user", "alice:inline"}, env: map[string]string{"CONSUMERD_ETCD_PASSWORD": "from-env"}, wantUser: "alice", wantPW: "inline"},
		{name: "file before env", args: []string{"--etcd.user", "alice", "--etcd.password-file", pwFile}, env: map[string]string{"CONSUMERD_ETCD_PASSWORD": "from-env"}, wantUser: "alice", wantPW: "from-file"},
		{name: "user from its env mirror", env: map[string]string{"CONSUMERD_ETCD_USER": "bob:env-inline"}, wantUser: "bob", wantPW: "env-inline"},
		{name: "file from its env mirror", env: map[string]string{"CONSUMERD_ETCD_USER": "bob", "CONSUMERD_ETCD_PASSWORD_FILE": pwFile}, wantUser: "bob", wantPW: "from-file"},
		{name: "inline and file", args: []string{"--etcd.user", "alice:inline", "--etcd.password-file", pwFile},
			wantErr: []string{"--etcd.user alice: gives a password, and so does --etcd.password-file " + pwFile, "give one"}},
		{name: "file without user", args: []string{"--etcd.password-file", pwFile}, wantErr: []string{"--etcd.password-file " + pwFile, "without --etcd.user"}},
		{name: "env password without user", env: map[string]string{"CONSUMERD_ETCD_PASSWORD": "x"}, wantErr: []string{"$CONSUMERD_ETCD_PASSWORD is set but --etcd.user is not"}},
		{name: "user without password", args: []string{"--etcd.user", "alice"},
			wantErr: []string{"--etcd.user alice: no password", "--etcd.user name:password", "--etcd.password-file FILE", "$CONSUMERD_ETCD_PASSWORD"}},
		{name: "empty user name", args: []string{"--etcd.user", ":pw"}, wantErr: []string{"--etcd.user: empty user name"}},
		{name: "empty inline password", args: []string{"--etcd.user", "alice:"}, wantErr: []string{"--etcd.user alice: empty password"}},
		{name: "missing password file", args: []string{"--etcd.user", "alice", "--etcd.password-file", missing}, wantErr: []string{"--etcd.password-file", missing, "no such file"}},
		{name: "empty password file", args: []string{"--etcd.user", "alice", "--etcd.password-file", emptyFile}, wantErr: []string{"--etcd.password-file " + emptyFile + ": empty"}},
		{name: "password flag refused", args: []string{"--etcd.password", "pw"}, wantErr: []string{"--etcd.password is not a command-line flag", "$CONSUMERD_ETCD_PASSWORD"}},
		{name: "wal user", kind: "wal", args: []string{"--wal.user", "carol"}, env: map[string]string{"CONSUMERD_WAL_PASSWORD": "nats-pw"}, wantUser: "carol", wantPW: "nats-pw"},
		{name: "wal user and creds", kind: "wal", args: []string{"--wal.user", "carol:pw", "--wal.creds", creds}, wantErr: []string{"--wal.creds and --wal.user both authenticate"}},
		{name: "wal password flag refused", kind: "wal", args: []string{"--wal.password", "pw"}, wantErr: []string{"--wal.password is not a command-line flag", "$CONSUMERD_WAL_PASSWORD"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cf, err := clientSecurityFrom(t, tc.args, tc.env)
			sec := cf.EtcdSec
			if tc.kind == "wal" {
				sec = cf.WALSec
			}
			var user, pw string
			if err == nil {
				user, pw, err = sec.credentials()
			}
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, want one with %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				for _, secret := range []string{"inline", "s3:cret", "from-file", "from-env"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error %q shows a password", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if user != tc.wantUser || pw != tc.wantPW {
				t.Fatalf("credentials = %q, %q; want %q, %q", user, pw, tc.wantUser, tc.wantPW)
			}
		})
	}
}

// TestClientFlagsCheck: a client command refuses inconsistent TLS flags
// as a usage error (exit 2) before it dials anything.
func TestClientFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd.cert", "c.pem"}, "--etcd.cert c.pem: given without --etcd.key"},
		{[]string{"--wal.key", "k.pem"}, "--wal.key k.pem: given without --wal.cert"},
		{[]string{"--http.cert", "c.pem"}, "--http.cert c.pem: given without --http.key"},
	} {
		cf, err := clientSecurityFrom(t, tc.args, nil)
		if err == nil {
			err = cf.Validate()
		}
		if !cmdline.IsUsage(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// TestTLSFiles: every certificate, key and CA file problem is named with
// its flag and file: unreadable, not PEM, a key that is not the
// certificate's, an expired certificate.
func TestTLSFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Issue(t, "client", tlstest.Client)
	_, otherKey := ca.Issue(t, "other", tlstest.Client)
	oldCert, oldKey := ca.IssueExpired(t, "old", tlstest.Client)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	garbage := writeTemp(t, "garbage.pem", "not a certificate\n")
	for _, tc := range []struct {
		name             string
		ca, cert, keyArg string
		want             []string
	}{
		{"good", ca.File, cert, key, nil},
		{"system roots and a client certificate", "", cert, key, nil},
		{"missing CA", missing, "", "", []string{"--etcd.cacert", missing, "no such file"}},
		{"CA not PEM", garbage, "", "", []string{"--etcd.cacert " + garbage + ": no PEM certificate"}},
		{"missing certificate", ca.File, missing, key, []string{"--etcd.cert", missing, "no such file"}},
		{"missing key", ca.File, cert, missing, []string{"--etcd.key", missing, "no such file"}},
		{"certificate not PEM", ca.File, garbage, key, []string{"--etcd.cert " + garbage + ": no PEM certificate"}},
		{"key not PEM", ca.File, cert, garbage, []string{"--etcd.key " + garbage + ": no PEM private key"}},
		{"key of another certificate", ca.File, cert, otherKey, []string{"--etcd.key " + otherKey + ": not the private key of the certificate in --etcd.cert " + cert}},
		{"expired", ca.File, oldCert, oldKey, []string{"--etcd.cert " + oldCert + ": the certificate expired at"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec := Security{kind: "etcd", CACert: tc.ca, Cert: tc.cert, Key: tc.keyArg}
			cfg, err := sec.tlsConfig()
			if tc.want == nil {
				if err != nil || cfg == nil {
					t.Fatalf("tlsConfig = %v, %v", cfg, err)
				}
				if (tc.ca != "") != (cfg.RootCAs != nil) || len(cfg.Certificates) != 1 {
					t.Fatalf("tlsConfig: roots %v, %d certificates", cfg.RootCAs != nil, len(cfg.Certificates))
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if cfg, err := (Security{kind: "etcd", User: "a:b"}).tlsConfig(); cfg != nil || err != nil {
		t.Errorf("no TLS flag: tlsConfig = %v, %v; want nil, nil", cfg, err)
	}
}

// TestEtcdClientConfig: TLS and credentials land in the clientv3 config,
// and a plain http:// endpoint with TLS flags is refused (clientv3 would
// silently drop TLS for it).
func TestEtcdClientConfig(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Issue(t, "member", tlstest.Client)
	sec := Security{kind: "etcd", CACert: ca.File, Cert: cert, Key: key, User: "consumerd", EnvPassword: "pw"}
	cfg, err := etcdClientConfig(t.Context(), []string{"https://127.0.0.1:2379", "127.0.0.1:2380"}, time.Second, sec)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || cfg.TLS.RootCAs == nil || len(cfg.TLS.Certificates) != 1 || cfg.Username != "consumerd" || cfg.Password != "pw" {
		t.Fatalf("config: TLS %v, user %q, password %q", cfg.TLS, cfg.Username, cfg.Password)
	}
	if _, err := etcdClientConfig(t.Context(), []string{"http://127.0.0.1:2379"}, time.Second, sec); err == nil ||
		!strings.Contains(err.Error(), "--etcd.endpoints http://127.0.0.1:2379: plain http://, but TLS flags are given (--etcd.cacert, --etcd.cert, --etcd.key") {
		t.Fatalf("http:// endpoint with TLS: %v", err)
	}
}

// tlsServer is an HTTP/2 TLS server requiring client certificates of ca,
// with a certificate of ca.
func tlsServer(t *testing.T, ca *tlstest.CA) *httptest.Server {
	t.Helper()
	cert, key := ca.Issue(t, "server", tlstest.Server|tlstest.Client)
	cfg, err := HTTPTLS{Cert: cert, Key: key, ClientCA: ca.File}.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	ts.EnableHTTP2 = true
	ts.TLS = cfg
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

// TestProbeEtcdTLS: before dialing, a TLS endpoint that refuses this
// client's certificate (said only after the handshake, with TLS 1.3) or
// whose certificate this client cannot verify fails at once, naming the
// flag to set; an accepted client passes.
func TestProbeEtcdTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	ts := tlsServer(t, ca)
	ep := []string{ts.URL}
	cert, key := ca.Issue(t, "member", tlstest.Client)
	full, err := clientTLS("etcd", ca.File, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	noCert, _ := clientTLS("etcd", ca.File, "", "")
	ctx := t.Context()
	if err := probeEtcd(ctx, ep, full, 2*time.Second, true); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	err = probeEtcd(ctx, ep, noCert, 2*time.Second, false)
	if err == nil || !strings.Contains(err.Error(), "remote error: tls") || !strings.Contains(err.Error(), "set --etcd.cert and --etcd.key") {
		t.Fatalf("without a client certificate: %v", err)
	}
	err = probeEtcd(ctx, ep, nil, 2*time.Second, false) // https://, system roots
	if err == nil || !strings.Contains(err.Error(), "set --etcd.cacert") {
		t.Fatalf("without the CA: %v", err)
	}
	dead := "https://127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	if err := probeEtcd(ctx, []string{dead}, full, time.Second, false); err != nil {
		t.Fatalf("refused, serve waits: %v", err)
	}
	if err := probeEtcd(ctx, []string{dead}, full, time.Second, true); err == nil || !strings.Contains(err.Error(), "connection refused by 127.0.0.1:") {
		t.Fatalf("refused, a client fails: %v", err)
	}
}

// TestHTTPClientTLS: the one client that calls members verifies them with
// --http.cacert, presents --http.cert, and says which flag to set when a
// member refuses it or cannot be verified.
func TestHTTPClientTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	ts := tlsServer(t, ca)
	cert, key := ca.Issue(t, "cli", tlstest.Client)
	get := func(h HTTPTLS) error {
		hc, err := h.Client(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(ts.URL + "/livez")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(HTTPTLS{CACert: ca.File, Cert: cert, Key: key}); err != nil {
		t.Fatalf("with CA and client certificate: %v", err)
	}
	for i := range 5 { // the member's refusal races the request's write: either is named
		err := get(HTTPTLS{CACert: ca.File})
		if err == nil || !strings.Contains(err.Error(), "set --http.cert and --http.key") {
			t.Fatalf("without a client certificate: %v", err)
		}
		if i == 0 {
			t.Logf("without a client certificate: %v", err)
		}
	}
	if err := get(HTTPTLS{Cert: cert, Key: key}); err == nil || !strings.Contains(err.Error(), "set --http.cacert") {
		t.Fatalf("without the CA: %v", err)
	}
}

// TestWALTLSAndUser: every NATS connection (OpenWAL, the snapshot store)
// takes natsSecurity's TLS and user: against a nats-server that verifies
// client certificates and has users, the flags connect, and a wrong
// password, a missing client certificate or CA fail naming the flag to
// fix.
func TestWALTLSAndUser(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	scert, skey := ca.Issue(t, "nats", tlstest.Server)
	cert, key := ca.Issue(t, "member", tlstest.Client)
	tc, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: scert, KeyFile: skey, CaFile: ca.File, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		TLSConfig: tc, TLS: true, TLSVerify: true, TLSTimeout: 2,
		Users: []*natsserver.User{{Username: "consumerd", Password: "nats-pw"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	url := srv.ClientURL()
	open := func(env map[string]string, args ...string) error {
		cf, err := clientSecurityFrom(t, args, env)
		if err != nil {
			t.Fatal(err)
		}
		sec, err := cf.WALSec.NATS()
		if err != nil {
			return err
		}
		op, err := OpenWAL(url, "consumerd", 1, 2*time.Second, sec, hclog.NewNullLogger())
		if err != nil {
			return err
		}
		defer op.Close()
		_, closeStore, err := OpenSnapshotStore(context.Background(), "", url, "consumerd", 1, 0, sec, hclog.NewNullLogger())
		if err != nil {
			return err
		}
		closeStore()
		return nil
	}
	all := []string{"--wal.cacert", ca.File, "--wal.cert", cert, "--wal.key", key}
	if err := open(map[string]string{"CONSUMERD_WAL_PASSWORD": "nats-pw"}, append(all, "--wal.user", "consumerd")...); err != nil {
		t.Fatalf("with every flag: %v", err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"wrong password", append(all, "--wal.user", "consumerd:wrong"), "check --wal.creds, or --wal.user"},
		{"no user", all, "check --wal.creds, or --wal.user"},
		{"no client certificate", []string{"--wal.cacert", ca.File, "--wal.user", "consumerd:nats-pw"}, "set --wal.cert and --wal.key"},
		{"no CA", []string{"--wal.cert", cert, "--wal.key", key, "--wal.user", "consumerd:nats-pw"}, "set --wal.cacert"},
	} {
		err := open(nil, c.args...)
		if err == nil || !strings.Contains(err.Error(), "cannot reach NATS JetStream at "+url) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s and %q", c.name, err, url, c.want)
		}
	}
}

// TestEtcdHint: etcd's refusals of credentials and permissions name the
// flag, or the role grant, that fixes them.
func TestEtcdHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{rpctypes.ErrAuthFailed, "check --etcd.user and its password"},
		{rpctypes.ErrUserEmpty, "etcd has authentication enabled: set --etcd.user"},
		{rpctypes.ErrPermissionDenied, "etcd user consumerd may not read and write the keys under --etcd.prefix /team/: grant"},
		{errors.New("boom"), ""},
	} {
		got := etcdHint(tc.err, "consumerd", "/team")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("etcdHint(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if got := etcdHint(rpctypes.ErrPermissionDenied, "consumerd", "/team"); !strings.Contains(got, "etcdctl role grant-permission ROLE --prefix=true readwrite /team/") {
		t.Errorf("permission hint %q lacks the grant command", got)
	}
}

// TestCheckCreds: --wal.creds must be a readable credentials file with a
// user JWT and a user NKey seed; errors name the flag and the file.
func TestCheckCreds(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	acct, _ := nkeys.CreateAccount()
	token, err := jwt.NewUserClaims(pub).Encode(acct)
	if err != nil {
		t.Fatal(err)
	}
	good, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	noSeed, _ := jwt.DecorateJWT(token)
	missing := filepath.Join(t.TempDir(), "missing.creds")
	for _, tc := range []struct {
		name, file, want string
	}{
		{"good", writeTemp(t, "good.creds", string(good)), ""},
		{"missing", missing, "--wal.creds: open " + missing},
		{"not creds", writeTemp(t, "garbage.creds", "hello\n"), "no user JWT in it"},
		{"no seed", writeTemp(t, "noseed.creds", string(noSeed)), "no user NKey seed in it"},
	} {
		sec, err := Security{kind: "wal", Creds: tc.file}.NATS()
		if tc.want == "" {
			if err != nil || sec.CredsFile != tc.file {
				t.Errorf("%s: natsSecurity = %+v, %v", tc.name, sec, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("%s: error %v, want one naming %s and %q", tc.name, err, tc.file, tc.want)
		}
	}
}
