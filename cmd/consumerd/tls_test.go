package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/tlstest"
	"github.com/consumerd/consumerd/internal/waitfor"
)

// TestTLSAndAuth runs a two-member cluster with every connection secured:
// Debian's etcd on https with client-certificate auth and etcd auth
// enabled (consumerd's user confined by its role to /consumerd/), the
// go.mod nats-server in operator (JWT) mode requiring TLS with verified
// client certificates (the members and the CLI use a .creds file), and the
// members serving HTTP over TLS, requiring client certificates. Topics,
// shards, publish, shards list and query go through the same flags; the
// query answer (gathered from both members, one forwarding to the other
// over TLS with its own certificate) equals the corpus's counts exactly.
// Then the same member started without its etcd client certificate, with a
// wrong etcd password, without its NATS client certificate or without its
// creds exits 1 at once with one line naming what was refused and the
// flag to set.
func TestTLSAndAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	etcdBin := findBinary(t, "etcd")
	bin := consumerdBinary(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	etcdCert, etcdKey := ca.Issue(t, "etcd", tlstest.Server|tlstest.Client)
	natsCert, natsKey := ca.Issue(t, "nats", tlstest.Server)
	// A member's certificate serves HTTP and is its client certificate
	// everywhere (etcd, NATS, other members); its common name is no etcd
	// user, so etcd authenticates the member by its password.
	memberCert, memberKey := ca.Issue(t, "member", tlstest.Server|tlstest.Client)
	cliCert, cliKey := ca.Issue(t, "cli", tlstest.Client)

	// etcd: TLS with client certificates, then auth through the API.
	cport, pport := freeport.Port(t), freeport.Port(t)
	etcdURL := fmt.Sprintf("https://127.0.0.1:%d", cport)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
	etcd := startProc(t, "etcd", filepath.Join(dir, "etcd.log"), nil, etcdBin,
		"--name", "tls", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "tls="+peer,
		"--cert-file", etcdCert, "--key-file", etcdKey, "--trusted-ca-file", ca.File, "--client-cert-auth",
		"--log-level", "warn")
	t.Cleanup(etcd.kill)
	const etcdPassword = "member-secret"
	setupEtcdAuth(t, etcd, etcdURL, ca.File, cliCert, cliKey, etcdPassword)

	// NATS: operator mode (a memory resolver preloaded with the accounts),
	// TLS verifying client certificates.
	nport := freeport.Port(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", nport)
	creds := natsOperatorConfig(t, dir, nport, natsCert, natsKey, ca.File)
	nats := startProc(t, "nats-server", filepath.Join(dir, "nats.log"), nil, natsServer(t), "-c", filepath.Join(dir, "nats.conf"))
	t.Cleanup(nats.kill)
	waitfor.Until(t, 30*time.Second, "nats-server to accept connections", func() (bool, string) {
		if nats.exited() {
			t.Fatalf("nats-server exited: %v\n%s", nats.err, nats.tail(20))
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", nport), time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})

	pwFile := filepath.Join(dir, "etcd-password")
	if err := os.WriteFile(pwFile, []byte(etcdPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A client command: flags for etcd and NATS, the etcd password and
	// the HTTP TLS files from the environment.
	clientEnv := []string{"CONSUMERD_ETCD_PASSWORD=" + etcdPassword,
		"CONSUMERD_HTTP_CACERT=" + ca.File, "CONSUMERD_HTTP_CERT=" + cliCert, "CONSUMERD_HTTP_KEY=" + cliKey}
	client := func(env []string, stdin string, args ...string) (string, string, error) {
		args = append(args, "--etcd.endpoints", etcdURL, "--etcd.cacert", ca.File, "--etcd.cert", cliCert, "--etcd.key", cliKey,
			"--etcd.user", "consumerd", "--wal.url", natsURL, "--wal.cacert", ca.File, "--wal.cert", cliCert, "--wal.key", cliKey,
			"--wal.creds", creds, "--dial-timeout", "10s")
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), strings.TrimSpace(errb.String()), err
	}
	mustClient := func(stdin string, args ...string) string {
		t.Helper()
		out, stderr, err := client(clientEnv, stdin, args...)
		if err != nil {
			t.Fatalf("consumerd %s: %v: %s", strings.Join(args, " "), err, stderr)
		}
		return out
	}

	mustClient("", "topics", "create", "--name", "words", "--partitions", "2")
	mustClient("", "topics", "create", "--name", "counts", "--partitions", "2")
	mustClient("", "shards", "create", "--app", "wordcount")

	// serveArgs are a member's flags: everything secured; drop removes the
	// flags named (with their values) to show what each one is for.
	serveArgs := func(id, httpAddr string, drop ...string) []string {
		flags := [][]string{
			{"--etcd.endpoints", etcdURL}, {"--etcd.cacert", ca.File}, {"--etcd.cert", memberCert}, {"--etcd.key", memberKey},
			{"--etcd.user", "consumerd"}, {"--etcd.password-file", pwFile},
			{"--wal.url", natsURL}, {"--wal.cacert", ca.File}, {"--wal.cert", memberCert}, {"--wal.key", memberKey}, {"--wal.creds", creds},
			{"--http.addr", httpAddr}, {"--http.cert", memberCert}, {"--http.key", memberKey}, {"--http.client-ca", ca.File}, {"--http.cacert", ca.File},
			{"--member.id", id}, {"--member.zone", "zone-" + id}, {"--data-dir", filepath.Join(dir, "member-"+id)},
			{"--etcd.lease-ttl", "2s"}, {"--shutdown-timeout", "10s"},
		}
		args := []string{"serve"}
	next:
		for _, f := range flags {
			for _, d := range drop {
				if f[0] == d {
					continue next
				}
			}
			args = append(args, f...)
		}
		return args
	}
	addrs := map[string]string{}
	for _, id := range []string{"m1", "m2"} {
		addrs[id] = fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
		p := startProc(t, "member "+id, filepath.Join(dir, "member-"+id+".log"), nil, bin, serveArgs(id, addrs[id])...)
		t.Cleanup(func() {
			p.kill()
			if t.Failed() {
				t.Logf("---- log tail of member %s ----\n%s", id, p.tail(40))
			}
		})
	}

	lines, counts := corpus(500)
	out := mustClient(strings.Join(lines, "\n")+"\n", "publish", "--topic", "words")
	if !strings.Contains(out, "published 500 messages") {
		t.Fatalf("publish: %q", out)
	}
	// Both shards PRIMARY, one on each member: a query must then cross
	// from member to member.
	var rows []shardRow
	waitfor.Until(t, 60*time.Second, "both shards PRIMARY on different members", func() (bool, string) {
		out, stderr, err := client(clientEnv, "", "shards", "list", "-o", "json")
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, stderr)
		}
		rows = nil
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return false, err.Error()
		}
		if ok, why := allPrimary(rows, 2, 1); !ok {
			return false, why
		}
		if rows[0].Primary == rows[1].Primary {
			return false, "both primaries on " + rows[0].Primary
		}
		return true, ""
	})
	want := renderCounts(counts)
	var got string
	waitfor.Until(t, 60*time.Second, "query --all to equal the corpus's counts", func() (bool, string) {
		out, stderr, err := client([]string{"CONSUMERD_ETCD_PASSWORD=" + etcdPassword}, "", "query", "--app", "wordcount", "--all",
			"--http.cacert", ca.File, "--http.cert", cliCert, "--http.key", cliKey)
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, stderr)
		}
		got = out
		return out == want, diffCounts(out, want)
	})
	if out := mustClient("", "members", "list", "-o", "json"); strings.Count(out, `"endpoint": "https://127.0.0.1:`) != 2 {
		t.Errorf("members list: want two https:// endpoints: %s", out)
	}

	// Over HTTPS with the client certificate: member m1 gathers every
	// shard from the primaries (one is on m2), presenting its own
	// certificate; probes and metrics are on the same TLS listener.
	hc := httpsClient(t, ca.File, cliCert, cliKey)
	defer hc.CloseIdleConnections()
	base := "https://" + addrs["m1"]
	code, body := httpsGet(t, hc, base+"/v1/query?app=wordcount&all=1")
	var qr struct {
		Entries []struct{ Key, Value string } `json:"entries"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &qr) != nil {
		t.Fatalf("GET /v1/query on m1: %d %s", code, body)
	}
	var b strings.Builder
	sort.Slice(qr.Entries, func(i, j int) bool { return qr.Entries[i].Key < qr.Entries[j].Key })
	for _, e := range qr.Entries {
		fmt.Fprintf(&b, "%s %s\n", e.Key, e.Value)
	}
	if b.String() != want {
		t.Errorf("m1's /v1/query over TLS differs from the corpus: %s", diffCounts(b.String(), want))
	}
	// A shard query sent to the member that is not its primary is
	// forwarded to the primary, over TLS with the member's certificate.
	for _, r := range rows {
		if r.Primary != "m1" {
			code, body := httpsGet(t, hc, base+"/v1/query?app=wordcount&all=1&shard="+r.ID)
			if code != http.StatusOK || !strings.Contains(string(body), `"`+r.ID+`"`) {
				t.Errorf("GET /v1/query?shard=%s on m1 (primary %s): %d %s", r.ID, r.Primary, code, body)
			}
		}
	}
	for _, path := range []string{"/livez", "/readyz", "/metrics"} {
		if code, body := httpsGet(t, hc, base+path); code != http.StatusOK {
			t.Errorf("GET %s over TLS: %d %s", path, code, body)
		}
	}
	noCert := httpsClient(t, ca.File, "", "")
	if _, err := noCert.Get(base + "/livez"); err == nil {
		t.Error("GET /livez without a client certificate succeeded; want it refused")
	}
	noCert.CloseIdleConnections()
	if code, _, err := httpGet("http://" + addrs["m1"] + "/livez"); err == nil && code == http.StatusOK {
		t.Error("plain http:// to a TLS member answered 200")
	}
	// The CLI without its HTTP client certificate: refused, saying which
	// flags to set.
	_, stderr, err := client([]string{"CONSUMERD_ETCD_PASSWORD=" + etcdPassword}, "", "query", "--app", "wordcount", "--all",
		"--http.cacert", ca.File, "--dial-timeout", "2s")
	if err == nil || !strings.Contains(stderr, "set --http.cert and --http.key") {
		t.Errorf("query without an HTTP client certificate: %v: %s; want it refused naming --http.cert", err, stderr)
	}
	t.Logf("query --all over TLS: %d tokens exact", strings.Count(got, "\n"))

	// The same member with one credential missing or wrong exits 1 at
	// once, with one line naming what was refused and the flag to set.
	for _, tc := range []struct {
		name  string
		drop  []string
		extra []string
		want  []string
	}{
		{"without its etcd client certificate", []string{"--etcd.cert", "--etcd.key"}, nil,
			[]string{"cannot reach etcd at " + etcdURL, "remote error: tls", "set --etcd.cert and --etcd.key"}},
		{"with a wrong etcd password", []string{"--etcd.password-file", "--etcd.user"}, []string{"--etcd.user", "consumerd:wrong"},
			[]string{"cannot reach etcd at " + etcdURL, "authentication failed", "check --etcd.user and its password"}},
		{"without its NATS client certificate", []string{"--wal.cert", "--wal.key"}, nil,
			[]string{"cannot reach NATS JetStream at " + natsURL, "TLS", "set --wal.cert and --wal.key"}},
		{"without its NATS creds", []string{"--wal.creds"}, nil,
			[]string{"cannot reach NATS JetStream at " + natsURL, "Authorization Violation", "check --wal.creds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// m3: the member's flags and a data directory of its own (m1's
			// and m2's are held by the running members).
			args := append(serveArgs("m3", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), tc.drop...), tc.extra...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			start := time.Now()
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("serve %s: %v, want exit 1; stderr: %s", tc.name, err, errb.String())
			}
			msg := strings.TrimSpace(errb.String())
			lines := strings.Split(msg, "\n")
			last := lines[len(lines)-1]
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("last line %q lacks %q", last, w)
				}
			}
			if n := strings.Count(msg, "consumerd: "); n != 1 || !strings.HasPrefix(last, "consumerd: ") {
				t.Errorf("want exactly one error line, got: %s", msg)
			}
			if strings.HasPrefix(tc.name, "without its etcd") && len(lines) != 1 {
				t.Errorf("stderr has %d lines, want the one: %s", len(lines), msg)
			}
			t.Logf("%s: exit 1 after %s: %s", tc.name, time.Since(start).Round(time.Millisecond), last)
		})
	}
}

// setupEtcdAuth enables etcd authentication with a client certificate
// (etcd requires one) and no user yet: a root user, and a user consumerd
// whose role may read and write only the keys under /consumerd/ (what
// README's etcdctl commands do), with password.
func setupEtcdAuth(t *testing.T, etcd *proc, url, caFile, certFile, keyFile, password string) {
	t.Helper()
	cfg := clientTLSConfig(t, caFile, certFile, keyFile)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 2 * time.Second, TLS: cfg, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	waitfor.Until(t, 30*time.Second, "etcd to serve on https", func() (bool, string) {
		if etcd.exited() {
			t.Fatalf("etcd exited: %v\n%s", etcd.err, etcd.tail(20))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "ping")
		return err == nil, fmt.Sprint(err)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []struct {
		what string
		do   func() error
	}{
		{"role root", func() error { _, err := cli.RoleAdd(ctx, "root"); return err }},
		{"user root", func() error { _, err := cli.UserAdd(ctx, "root", "root-secret"); return err }},
		{"grant root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"role consumerd", func() error { _, err := cli.RoleAdd(ctx, "consumerd"); return err }},
		{"grant /consumerd/", func() error {
			_, err := cli.RoleGrantPermission(ctx, "consumerd", "/consumerd/", clientv3.GetPrefixRangeEnd("/consumerd/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"user consumerd", func() error { _, err := cli.UserAdd(ctx, "consumerd", password); return err }},
		{"grant consumerd", func() error { _, err := cli.UserGrantRole(ctx, "consumerd", "consumerd"); return err }},
		{"auth enable", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("etcd auth setup: %s: %v", s.what, err)
		}
	}
	// The role confines consumerd: a key outside the prefix is refused.
	user, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, TLS: cfg, Logger: zap.NewNop(),
		Username: "consumerd", Password: password})
	if err != nil {
		t.Fatalf("etcd client as consumerd: %v", err)
	}
	defer user.Close()
	if _, err := user.Get(ctx, "/elsewhere/x"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("consumerd reading /elsewhere/x: %v, want permission denied", err)
	}
}

// natsOperatorConfig writes dir/nats.conf for a nats-server in operator
// mode on port: an operator, a system account and an account with
// JetStream, preloaded in a memory resolver; TLS with verified client
// certificates. It returns the path of a user's .creds file (the user JWT
// and its seed, in the decorated format nsc writes).
func natsOperatorConfig(t *testing.T, dir string, port int, certFile, keyFile, caFile string) string {
	t.Helper()
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	operator, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	sys, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	acct, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	usr, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	opPub, sysPub, acctPub, userPub := must(operator.PublicKey()), must(sys.PublicKey()), must(acct.PublicKey()), must(usr.PublicKey())

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "test-operator"
	oc.SystemAccount = sysPub
	opJWT := must(oc.Encode(operator))
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT := must(sc.Encode(operator))
	ac := jwt.NewAccountClaims(acctPub)
	ac.Name = "CONSUMERD"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1, MaxAckPending: -1}
	acctJWT := must(ac.Encode(operator))
	uc := jwt.NewUserClaims(userPub)
	uc.Name = "consumerd"
	userJWT := must(uc.Encode(acct))
	seed, err := usr.Seed()
	if err != nil {
		t.Fatal(err)
	}
	credsBytes, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "consumerd.creds")
	if err := os.WriteFile(creds, credsBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`listen: "127.0.0.1:%d"
server_name: tls-test
jetstream { store_dir: %q }
tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 2 }
operator: %s
system_account: %s
resolver: MEMORY
resolver_preload: {
  %s: %s
  %s: %s
}
`, port, filepath.Join(dir, "nats"), certFile, keyFile, caFile, opJWT, sysPub, sysPub, sysJWT, acctPub, acctJWT)
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return creds
}

func clientTLSConfig(t *testing.T, caFile, certFile, keyFile string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func httpsClient(t *testing.T, caFile, certFile, keyFile string) *http.Client {
	t.Helper()
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLSConfig(t, caFile, certFile, keyFile)}}
}

func httpsGet(t *testing.T, hc *http.Client, url string) (int, []byte) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// TestTLSFlagErrors: TLS and auth flags that cannot work fail before
// anything is dialled, as one line naming the flag (and the file): exit 2
// for a contradiction, 1 for a file that cannot be read.
func TestTLSFlagErrors(t *testing.T) {
	bin := consumerdBinary(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	dead := fmt.Sprintf("https://127.0.0.1:%d", freeport.Port(t))
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"TLS flags with the embedded etcd", []string{"serve", "--etcd.cacert", "ca.pem", "--wal.url", "nats://127.0.0.1:1"}, 2,
			"--etcd.endpoints: --etcd.cacert apply to an external etcd"},
		{"missing CA file", []string{"members", "list", "--etcd.endpoints", dead, "--etcd.cacert", missing}, 1,
			"--etcd.cacert: open " + missing + ": no such file or directory"},
		{"user without password", []string{"members", "list", "--etcd.user", "alice"}, 2, "--etcd.user alice: no password"},
		{"password on the command line", []string{"members", "list", "--etcd.password", "pw"}, 2,
			"--etcd.password is not a command-line flag"},
		{"NATS user and creds", []string{"topics", "list", "--wal.user", "a:b", "--wal.creds", "u.creds"}, 2,
			"--wal.creds and --wal.user both authenticate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.wantCode {
				t.Fatalf("%v, want exit %d; stderr: %s", err, tc.wantCode, errb.String())
			}
			if first := strings.SplitN(errb.String(), "\n", 2)[0]; !strings.Contains(first, tc.want) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.want)
			}
		})
	}
}
