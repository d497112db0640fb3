package connect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hashicorp/go-hclog"
)

// DialEtcd connects a client command to etcd with sec's TLS and
// credentials and checks that it answers (dialEtcd), once: endpoints that
// all refuse the connection fail at once.
func DialEtcd(ctx context.Context, endpoints []string, prefix string, timeout time.Duration, sec Security) (*clientv3.Client, error) {
	return dialEtcd(ctx, hclog.NewNullLogger(), endpoints, prefix, timeout, sec, true)
}

// DialEtcdAtStart connects a starting member to etcd: like DialEtcd, but
// endpoints that refuse the connection are waited for (serve may start
// before etcd does), and so is an etcd that answers but cannot serve yet
// (RetryAtStart, logging each try to log).
func DialEtcdAtStart(ctx context.Context, log hclog.Logger, endpoints []string, prefix string, timeout time.Duration, sec Security) (*clientv3.Client, error) {
	return dialEtcd(ctx, log, endpoints, prefix, timeout, sec, false)
}

// dialEtcd connects to etcd with sec's TLS and credentials
// (etcdClientConfig) and checks that it answers, by counting the key
// <prefix>/ping (under the prefix, so a role confined to it may read it):
// the client itself connects lazily, so an unreachable cluster would
// otherwise surface later as a hang. probeEtcd first fails at once when no
// endpoint can answer: a TLS handshake refused names why and the flag to
// set, and endpoints that all refuse the connection fail only when
// refusedIsFinal.
func dialEtcd(ctx context.Context, log hclog.Logger, endpoints []string, prefix string, timeout time.Duration, sec Security, refusedIsFinal bool) (*clientv3.Client, error) {
	where := strings.Join(endpoints, ",")
	cfg, err := etcdClientConfig(ctx, endpoints, timeout, sec)
	if err != nil {
		return nil, err
	}
	if err := probeEtcd(ctx, endpoints, cfg.TLS, timeout, refusedIsFinal); err != nil {
		if errors.As(err, new(refusedError)) {
			return nil, fmt.Errorf("cannot reach etcd at %s: %w (is etcd running there? see --etcd.endpoints)", where, err)
		}
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", where, err)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", timeout)
		}
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", where, withHint(err, etcdHint(err, cfg.Username, prefix)))
	}
	ping := func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := cli.Get(cctx, prefix+"/ping", clientv3.WithCountOnly())
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s", timeout)
		}
		return err
	}
	if refusedIsFinal {
		err = ping(ctx)
	} else { // serve: an etcd electing a leader is waited out
		err = RetryAtStart(ctx, log, "reading "+prefix+"/ping", ping)
	}
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", where, withHint(err, etcdHint(err, cfg.Username, prefix)))
	}
	return cli, nil
}
