// Package wordcount is consumerd's built-in example application: it counts
// the whitespace-separated tokens (strings.Fields) of every message of topic
// "words", exactly once, and publishes each changed count to topic
// "counts".
//
// State: key "w/<token>" → the decimal count, in the shard's RocksDB. The
// shard cache holds the counts touched by the open transaction (a map), so
// a token is read from the database at most once per transaction; Flush
// writes them to the transaction and publishes them (key = token, payload =
// count) to partition i of "counts" for shard i (a shard that reads several
// partitions of "words" publishes to the lowest of them). A line is routed
// by its key (the whole line), so one token may be counted on several
// shards: Query and Scan read one shard, and Merge sums one token's counts
// across shards, which is what `consumerd query` does.
//
// App returns the shard.App to register with a daemon; Count is the
// reference model (the exact counts of a set of lines) that tests and the
// benchmark compare against.
//
// A daemon that runs it, or your own Consumer, is one line:
//
//	func main() { os.Exit(daemon.Main(wordcount.App(), myapp.App())) }
package wordcount
