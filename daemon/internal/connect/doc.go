// Package connect is how consumerd reaches its backends, for the member
// (package server) and the client commands alike, with one place per rule:
//
//   - Security (tls.go, tls_etcd.go, tls_nats.go): the TLS and
//     authentication flags of etcd (kind "etcd") and of NATS (kind "wal"),
//     read and checked when the command starts; errors name the flag and
//     the file, and a server's refusal names the flag that would change its
//     mind (the hints). HTTPTLS (tls_http.go) is the same for the members'
//     HTTP: the member serves with ServerConfig, every caller of a member
//     uses Client.
//   - etcd (etcd.go, etcdretry.go): DialEtcd for a client command (one try:
//     a refused connection fails at once, naming --etcd.endpoints),
//     DialEtcdAtStart for a member, which waits out an etcd that is not up
//     yet or is electing a leader (RetryAtStart: the one rule for what a
//     starting member retries, TransientEtcd).
//   - the WAL (walopen.go): OpenWAL, OpenWALAtStart (which waits while
//     JetStream does not answer yet).
//   - the cluster's shared settings in etcd (namespace.go): the WAL
//     namespace and stream replication the first member records and every
//     later member and client follows (ClaimNamespace, ClaimReplicas,
//     RecordedReplicas), and the one derivation of a namespace from the
//     prefix (WALNamespace).
//   - the snapshot store (snapstore.go): OpenSnapshotStore.
//   - ClientFlags: the connection flags every client command takes, and
//     Etcd/OpenWAL that connect with them.
//
// It knows nothing of commands or shards: it is the layer below the member
// and the CLI.
package connect
