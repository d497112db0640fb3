package jetstream_test

import (
	"fmt"

	"github.com/consumerd/consumerd/wal/walimpls/jetstream"
)

// Where a cluster's data lives in NATS: the namespace of its etcd prefix,
// then one stream per channel and the snapshot bucket.
func ExampleNamespaceOf() {
	for _, prefix := range []string{"/consumerd", "/team-a/prod"} {
		ns, err := jetstream.NamespaceOf(prefix)
		if err != nil {
			panic(err)
		}
		for _, channel := range []string{"words/0003", "recovery/wordcount-0003"} {
			tok, err := jetstream.EscapeChannel(channel)
			if err != nil {
				panic(err)
			}
			fmt.Printf("%s %s: stream %s_%s, subject %s.%s.data\n", prefix, channel, ns, tok, ns, tok)
		}
		fmt.Printf("%s snapshots: bucket %s-snapshots\n", prefix, ns)
	}
	// Output:
	// /consumerd words/0003: stream consumerd_words_s0003, subject consumerd.words_s0003.data
	// /consumerd recovery/wordcount-0003: stream consumerd_recovery_swordcount-0003, subject consumerd.recovery_swordcount-0003.data
	// /consumerd snapshots: bucket consumerd-snapshots
	// /team-a/prod words/0003: stream team--a-sprod_words_s0003, subject team--a-sprod.words_s0003.data
	// /team-a/prod recovery/wordcount-0003: stream team--a-sprod_recovery_swordcount-0003, subject team--a-sprod.recovery_swordcount-0003.data
	// /team-a/prod snapshots: bucket team--a-sprod-snapshots
}
