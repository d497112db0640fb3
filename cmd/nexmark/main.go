// Command nexmark is a consumerd daemon running the Nexmark benchmark: every
// consumerd command (`nexmark serve` runs members with the stage apps of
// every query), plus setup, generate and check (examples/nexmark/nexmarkcli).
//
//	nexmark serve --member.id a --etcd.endpoints ... --wal.url ...
//	nexmark setup --partitions 4 --queries all --standbys 1
//	nexmark generate --events 5000000
//	nexmark check --query all
package main

import (
	"context"
	"os"

	"github.com/consumerd/consumerd/daemon"
	"github.com/consumerd/consumerd/examples/nexmark"
	"github.com/consumerd/consumerd/examples/nexmark/nexmarkcli"
)

func main() {
	// A client command ends on SIGINT by Go's default; serve installs its
	// own handler for a graceful shutdown, so no context-wide one here.
	os.Exit(daemon.Run(context.Background(), os.Args[1:], daemon.Options{
		Name:     "nexmark",
		Apps:     nexmark.Apps(),
		Commands: nexmarkcli.Commands(),
	}))
}
