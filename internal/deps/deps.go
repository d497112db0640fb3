//go:build tools

package deps

import (
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/linxGnu/grocksdb"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "go.uber.org/goleak"
	_ "sigs.k8s.io/yaml"
)
