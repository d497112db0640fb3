package connect

// TLS on the members' HTTP: the server and the client of members and commands.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// HTTPTLS are the HTTP TLS flags. On serve: --http.cert/--http.key, the
// member's certificate, served and presented when it calls another member;
// --http.client-ca, the CA of the client certificates it then requires;
// --http.cacert, the CA verifying other members. On a client command that
// calls members: --http.cacert, and --http.cert/--http.key, the client
// certificate it presents.
type HTTPTLS struct {
	Cert, Key string
	CACert    string
	ClientCA  string // serve only
}

func (h *HTTPTLS) Bind(fs *pflag.FlagSet, serve bool) {
	if serve {
		fs.StringVar(&h.Cert, "http.cert", "", "PEM certificate the member serves HTTP with (TLS; the advertised endpoint becomes https://), also presented as its client certificate when it calls another member")
		fs.StringVar(&h.Key, "http.key", "", "PEM file of the private key of --http.cert")
		fs.StringVar(&h.ClientCA, "http.client-ca", "", "PEM CA certificate(s): require every HTTP client (members, the CLI, scrapers, probes) to present a certificate they signed (needs --http.cert)")
		fs.StringVar(&h.CACert, "http.cacert", "", "PEM CA certificate(s) that verify other members' HTTP certificates (default: the system's roots)")
		return
	}
	fs.StringVar(&h.CACert, "http.cacert", "", "PEM CA certificate(s) that verify the members' HTTP certificates when a command calls members (query, shards list; default: the system's roots)")
	fs.StringVar(&h.Cert, "http.cert", "", "PEM client certificate to present to members that require one (serve --http.client-ca), with --http.key")
	fs.StringVar(&h.Key, "http.key", "", "PEM file of the private key of --http.cert")
}

// check is the flags' consistency (no file is read).
func (h HTTPTLS) Check() error {
	if err := pairCheck("http", h.Cert, h.Key); err != nil {
		return err
	}
	if h.ClientCA != "" && h.Cert == "" {
		return fmt.Errorf("--http.client-ca %s: verifying client certificates needs TLS: give --http.cert and --http.key too", h.ClientCA)
	}
	return nil
}

// scheme is the member's URL scheme: https with --http.cert.
func (h HTTPTLS) Scheme() string {
	if h.Cert != "" {
		return "https"
	}
	return "http"
}

// serverConfig is the member's HTTP server TLS configuration, nil without
// --http.cert.
func (h HTTPTLS) ServerConfig() (*tls.Config, error) {
	if err := h.Check(); err != nil {
		return nil, err
	}
	if h.Cert == "" {
		return nil, nil
	}
	cert, err := loadKeyPair("http", h.Cert, h.Key)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if h.ClientCA != "" {
		pool, err := loadCAs("--http.client-ca", h.ClientCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// client is the one HTTP client that calls members (a member forwarding a
// query or gathering from others, checking a member id's holder; the CLI's
// query and shards list): it verifies members with --http.cacert and
// presents --http.cert; an error says which flag would help.
func (h HTTPTLS) Client(timeout time.Duration) (*http.Client, error) {
	if err := h.Check(); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if h.CACert != "" || h.Cert != "" {
		cfg, err := clientTLS("http", h.CACert, h.Cert, h.Key)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Timeout: timeout, Transport: hintTransport{tr, h.Cert != ""}}, nil
}

// hintTransport adds tlsHint's advice to a failed request's error.
type hintTransport struct {
	*http.Transport
	hasCert bool // a client certificate is configured
}

func (t hintTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.Transport.RoundTrip(req)
	if err == nil {
		return resp, nil
	}
	if h := tlsHint("the member", "http", err); h != "" {
		return nil, withHint(err, h)
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return nil, withHint(err, "the member serves plain HTTP: its advertised endpoint should be http://")
	}
	if req.URL.Scheme != "https" || isTimeout(err) || errors.Is(err, syscall.ECONNREFUSED) || req.Context().Err() != nil {
		return nil, err
	}
	// With TLS 1.3 a member refuses a client certificate after the
	// client's handshake, and the request may see only the closed
	// connection ("connection reset", HTTP/2's "client conn could not be
	// established"): a handshake of its own reads the member's alert.
	if perr := probeEndpoint(req.Context(), "https://"+req.URL.Host, t.TLSClientConfig, 2*time.Second); perr != nil {
		if h := tlsHint("the member", "http", perr); h != "" {
			return nil, withHint(fmt.Errorf("%w; %v", err, perr), h)
		}
	}
	if !t.hasCert && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)) {
		return nil, withHint(err, "the member closed the connection after the TLS handshake: if it requires client certificates (serve --http.client-ca), set --http.cert and --http.key")
	}
	return nil, err
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (t hintTransport) CloseIdleConnections() { t.Transport.CloseIdleConnections() }
