// Package supervisor is the engine behind `localcloud up`: it owns a stack's
// data dir while up runs, keeps a handle per binding (a SQLite KV store's
// open only while it is used, see Descriptors below), runs the
// embedded NATS hint server, publishes what it serves in runtime.json,
// applies edits of the stack file as a diff, and watches the stores for
// being deleted, replaced or loosened.
//
// # Ownership
//
// One up owns a data dir at a time: [Start] takes an exclusive flock(2) on
// <dataDir>/.lock and writes its pid into the file, so a second up fails at
// once with a [*LockedError] naming the holder. The kernel drops the lock
// when the owner dies, even by kill -9, so a stale lock needs no cleanup; a
// runtime.json left behind is simply overwritten. [Probe] lets other
// commands (env, status) ask whether an up owns a data dir without
// disturbing it.
//
// # Lifecycle
//
// [Start] creates the data dir (0700), takes the lock, opens every store
// (directories 0700, files 0600, format marker checked; a store of another
// format stops the start and is left untouched; a SQLite KV store is closed
// again at once) while the NATS server
// starts, starts the hint source (below), writes runtime.json and starts two
// background loops: the stack file watcher and the health check.
// [Supervisor.Close] undoes it in reverse: loops, hint source, stores, NATS,
// runtime.json, lock.
//
// # Hints
//
// up publishes the wake-up hints that no library call publishes: one
// notify.Publisher on an in-process connection to the embedded server feeds
// one hintsrc.Source, to which every queue binding is added (binding name,
// subject localcloud.<stack>.<binding>.available) once its store is open.
// The source covers foreign writers (inotify, confirmed by PRAGMA
// data_version), leases that end and delayed messages coming due. A reload
// removes a binding from the source before closing its handle and adds it
// again on reopen; a new stack name re-adds every queue under its new
// subject. Hints are lossy by contract, so a source that cannot start or a
// queue that cannot be added is logged and served without them.
//
// # Reload
//
// The watcher watches the stack file's folder (editors replace files, which
// breaks a watch on the file itself), filters by name and debounces. It and
// SIGHUP (wired by the caller to [Supervisor.Reload]) re-read the file. A
// valid file is applied as a diff by binding name: new bindings are opened,
// removed ones closed (their files stay), changed settings applied (the
// handle is reopened only when the type, path or durability changed, or
// where a queue's messages move: its dead-letter policy or the queues that
// dead-letter into it), unchanged bindings are not touched, and NATS stays
// up. The SQS API's CreateQueue and DeleteQueue (sqsqueues.go) run the same
// path after writing config.SQSStateFile. A file with
// mistakes, or a change that cannot be applied, is logged problem by problem
// and the last good stack keeps being served; so is a stack file replaced by
// something that is not a regular file (a FIFO, a device), which is never
// read. The file is read and parsed, and new stores opened, before the
// supervisor's lock is taken: a reload never holds up health checks or a
// stop.
//
// # Descriptors
//
// An open SQLite store holds about six descriptors (the database, its -wal
// and -shm on two connections, the lock file). A KV binding of an engine
// with engine.Traits.CloseIdle (SQLite) is therefore open only while it is
// used: [Supervisor.KV] (the explorer's way in) opens it again on demand
// through engine.Handle.Reopen, which refuses a store deleted or replaced
// since the first open, and the release it returns ends the use; the store
// is closed once unused for [Options.StoreIdleTimeout] (30 s), or at once
// when more than [Options.MaxIdleStores] unused ones are open (by default
// as many as a quarter of the open-file limit holds, 16..1024), the least
// recently used first (idle.go). A store in use is never closed under
// its user: a reload that drops it leaves the close to the last release.
// Queue bindings keep their handles while served (up's hint source holds a
// probe connection on each), about six descriptors per SQLite queue; the
// Go runtime raises up's soft open-file limit to the hard one at start, so
// on Linux with a hard limit of 20,000 a stack of about 3,300 SQLite queues
// fits, beside any number of KV bindings. JetStream bindings share up's one
// connection.
//
// # Health
//
// Every [Options.HealthInterval] each binding's engine looks at its store
// (engine.Handle.Health, on a closed KV handle as on an open one): on
// SQLite the directory and database file are compared, with stat(2) only,
// against the device and inode recorded when the store was first opened,
// their modes against 0700 and 0600 and the file's size against whole
// pages (the database file is never opened here: closing any descriptor
// on it would drop the locks SQLite holds); on JetStream the connection's
// status. A
// problem is logged once when it appears and once when it clears, and shown
// in runtime.json; nothing is ever recreated.
package supervisor
