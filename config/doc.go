// Package config reads and checks localcloud stack files.
//
// A stack file is YAML. It names the stack, says where the stores live and
// lists the KV and queue bindings that `localcloud up` provisions:
//
//	version: 1
//	name: shop
//	dataDir: .localcloud          # default; relative to the stack file's folder
//	notify:
//	  listen: 127.0.0.1:4222      # default; port 0 picks a free port
//	  token: ${SHOP_NATS_TOKEN}   # required only when listen is not loopback
//	bindings:
//	  carts:
//	    type: kv
//	  orders:
//	    type: queue
//	    visibilityTimeout: 30s
//	    maxAttempts: 5
//	    deadLetter: orders-dlq
//	  orders-dlq:
//	    type: queue
//
// # Engines
//
// A binding runs on engine sqlite (the default: a SQLite file under
// dataDir) or jetstream (a NATS JetStream stream; no path, which is
// refused). A jetstream binding may set replicas, 1..5: 1 by default, and
// the only value, on up's embedded server; 3 by default on the cluster an
// optional top-level section names:
//
//	jetstream:
//	  servers: [nats://nats-1.internal:4222, tls://nats-2.internal:4222]
//	  token: ${NATS_TOKEN}     # only this form: the variable's name is kept
//	  creds: secrets/app.creds # relative to the stack file's folder
//	  tls: {ca: ca.pem, cert: client.pem, key: client-key.pem}
//
// A literal token is refused, as the stack file is committed to git;
// [JetStream.TokenEnv] keeps the variable's name and nothing keeps its
// value, so no secret reaches runtime.json, health or env output. The
// variable is read when a connection is made (up, FromEnv), not here.
// servers must be nats:// or tls:// URLs without a user or password;
// token, creds and tls need servers. A dead-letter pair must be on one
// engine.
//
// # Reading
//
// [Load] reads a file; [Parse] reads from any [io.Reader]. Both walk the
// YAML node tree themselves instead of decoding into a struct, so that every
// problem in the file is found in one pass: an unknown field, a duplicate key,
// a value of the wrong type, a value out of range, a broken cross reference.
// The problems come back together as one [*Errors], each with its file, line
// and column, formatted one per line as
//
//	stack.yaml:7:24: bindings.orders.visibilityTimeout: must be a duration between 1s and 12h, got "3 parsecs"
//
// [*Errors] matches [ErrInvalid] under [errors.Is]. A stack file that cannot
// be read at all (missing, unreadable) gives the underlying error instead,
// wrapped, so errors.Is(err, fs.ErrNotExist) works.
//
// # Environment variables
//
// ${NAME} inside a scalar value is replaced by the variable's value. This
// happens after YAML parsing, so a value can never inject YAML structure, and
// it never happens in keys. $$ stands for a literal $ (so $${NAME} gives the
// text ${NAME}); a $ followed by anything else is kept as it is. A variable
// that is not set is an error; one that is set to the empty string is not,
// except in a secret: notify.token, jetstream.token (whose variable, when
// set, must not be empty; an unset one is reported by the connection that
// reads it) and jetstream.creds fail closed, as an empty token would turn
// authentication off. Leave such a field out for none.
// Tests inject their own lookup with [WithLookupEnv].
//
// # Paths
//
// dataDir is relative to the stack file's folder unless absolute. A binding's
// directory defaults to <dataDir>/<type>/<name>; a relative path is relative to
// dataDir and may not leave it, neither with ".." nor through a symlink in a
// part of the path that already exists. An absolute path may point anywhere and
// is flagged in [Binding.AbsolutePathGiven]. No two bindings may share a
// directory or nest one inside the other, and no binding may use dataDir
// itself. These checks look at the file system as it is when the stack is read;
// nothing is created.
package config
