// Command consumerd runs a consumerd member (`consumerd serve`) and the client
// subcommands that manage and query a cluster. All of it lives in package
// daemon; this main only registers the built-in applications.
package main

import (
	"os"

	"github.com/consumerd/consumerd/daemon"
	"github.com/consumerd/consumerd/examples/wordcount"
)

func main() { os.Exit(daemon.Main(wordcount.App())) }
