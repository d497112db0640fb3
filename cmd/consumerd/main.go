package main

import (
	"os"

	"github.com/consumerd/consumerd/daemon"
	"github.com/consumerd/consumerd/examples/pipeline"
	"github.com/consumerd/consumerd/examples/wordcount"
)

func main() { os.Exit(daemon.Main(wordcount.App(), pipeline.Split(), pipeline.Tally())) }
