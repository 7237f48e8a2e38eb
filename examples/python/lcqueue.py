"""A localqueue.v1 client in Python's standard library, written from docs/FORMAT.md.

It opens a queue binding from the environment that `localcloud run` sets,
runs the statements localcloud itself runs (taking the store's lock file, as
localcloud's writers do), and listens for wake-up hints with a minimal NATS
subscriber over a raw socket. Nothing here depends on localcloud's Go code.
"""

import fcntl
import json
import os
import random
import socket
import sqlite3
import threading
import time
import urllib.parse
import uuid
from contextlib import contextmanager

MARKER = "localqueue.v1"
FILE_NAME = "localqueue.sqlite"
LOCK_NAME = ".localqueue.sqlite.lock"
MAX_PAYLOAD_BYTES = 65536
MAX_RECEIVE_BATCH = 10
BUSY_TIMEOUT_MS = 5000

# The statements of docs/FORMAT.md, byte for byte.
STMT_SEND = """INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?3, 0)"""
STMT_ANY = "SELECT 1 FROM messages WHERE visible_at <= ?1 LIMIT 1"
STMT_DUE = """WITH head AS MATERIALIZED (SELECT id, enqueued_at FROM (SELECT id, enqueued_at, visible_at FROM messages
WHERE attempt IS 0 AND visible_at IS NOT enqueued_at ORDER BY enqueued_at, id LIMIT 64) WHERE visible_at <= ?1 LIMIT ?2)
SELECT id, enqueued_at FROM messages WHERE attempt IS 0 AND visible_at = enqueued_at AND enqueued_at <= ?1
UNION ALL SELECT id, enqueued_at FROM head WHERE (SELECT COUNT(*) FROM head) = ?2
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS 0 AND visible_at IS NOT enqueued_at AND visible_at <= ?1
AND (SELECT COUNT(*) FROM head) < ?2 ORDER BY +enqueued_at, id LIMIT ?2)
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS NOT 0 AND visible_at <= ?1 ORDER BY +enqueued_at, id LIMIT ?2)
ORDER BY enqueued_at, id LIMIT ?2"""
# With a dead-letter policy: do not claim spent messages; localcloud's next
# receive on the queue moves them (docs/FORMAT.md, "The lc_ tables"). The
# select above with "attempt < ?3" in each of its parts.
STMT_DUE_UNSPENT = ("""WITH head AS MATERIALIZED (SELECT id, enqueued_at FROM (SELECT id, enqueued_at, visible_at, attempt FROM messages
WHERE attempt IS 0 AND visible_at IS NOT enqueued_at ORDER BY enqueued_at, id LIMIT 64) WHERE visible_at <= ?1 AND attempt < ?3 LIMIT ?2)
SELECT id, enqueued_at FROM messages WHERE attempt IS 0 AND visible_at = enqueued_at AND enqueued_at <= ?1 AND attempt < ?3
UNION ALL SELECT id, enqueued_at FROM head WHERE (SELECT COUNT(*) FROM head) = ?2
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS 0 AND visible_at IS NOT enqueued_at AND visible_at <= ?1
AND attempt < ?3 AND (SELECT COUNT(*) FROM head) < ?2 ORDER BY +enqueued_at, id LIMIT ?2)
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS NOT 0 AND visible_at <= ?1 AND attempt < ?3 ORDER BY +enqueued_at, id LIMIT ?2)
ORDER BY enqueued_at, id LIMIT ?2""")
STMT_CLAIM = """UPDATE messages
SET visible_at = ?1, attempt = attempt + 1,
receipt_handle = ?2 WHERE id = ?3 AND payload_type IS NOT NULL AND payload_data IS NOT NULL AND attempt IS NOT NULL
RETURNING payload_type, payload_data, attempt"""
STMT_ACK = "DELETE FROM messages WHERE id = ?1 AND receipt_handle = ?2"
STMT_NACK = "UPDATE messages SET visible_at = ?3 WHERE id = ?1 AND receipt_handle = ?2"
STMT_EXISTS = "SELECT 1 FROM messages WHERE id = ?1"


class QueueError(Exception):
    """A queue operation failed; code is the spec's error code."""

    def __init__(self, code, msg):
        super().__init__(f"{code}: {msg}")
        self.code = code


class StaleReceipt(QueueError):
    """The message was delivered again under a newer receipt."""

    def __init__(self, receipt):
        super().__init__("QUEUE_OPERATION_FAILED", f"stale receipt {receipt!r}: the message was redelivered")


def now_ms():
    """Unix epoch milliseconds, the unit of every time column."""
    return time.time_ns() // 1_000_000


def read_binding(name):
    """Returns the decoded JSON of LOCALCLOUD_BINDING_<NAME> for a queue binding."""
    var = "LOCALCLOUD_BINDING_" + name.upper().replace("-", "_")
    raw = os.environ.get(var, "")
    if not raw.strip():
        raise QueueError("BINDING_SETUP_FAILED",
                         f"{var} is not set; start the program with `localcloud run -- CMD`")
    try:
        b = json.loads(raw)
    except ValueError as e:
        raise QueueError("BINDING_SETUP_FAILED", f"{var}: not JSON ({e}): {raw[:120]!r}") from None
    if b.get("service") != "local-queue":
        raise QueueError("BINDING_SETUP_FAILED", f"{var}: service is {b.get('service')!r}, want 'local-queue'")
    path = b.get("queuePath", "")
    if not os.path.isabs(path):
        raise QueueError("BINDING_SETUP_FAILED", f"{var}: queuePath must be an absolute path, got {path!r}")
    ms = b.get("visibilityTimeoutMs", 30000)
    if not isinstance(ms, int) or isinstance(ms, bool) or not 1 <= ms <= 12 * 3600 * 1000:
        raise QueueError("BINDING_SETUP_FAILED",
                         f"{var}: visibilityTimeoutMs must be an integer between 1 and 43200000, got {ms!r}")
    b["visibilityTimeoutMs"] = ms
    ma = b.get("maxAttempts", 0)
    if not isinstance(ma, int) or isinstance(ma, bool) or not 0 <= ma <= 1000:
        raise QueueError("BINDING_SETUP_FAILED", f"{var}: maxAttempts must be an integer between 1 and 1000, got {ma!r}")
    b["maxAttempts"] = ma
    return b


def parse_receipt(receipt):
    """Splits "{id}:{uuid}"; None for anything a store could not have issued."""
    id_str, sep, u = receipt.partition(":")
    if not sep or not id_str.isdigit() or id_str != str(int(id_str)) or int(id_str) <= 0:
        return None
    try:
        if str(uuid.UUID(u)) != u:  # only the canonical lower-case form
            return None
    except ValueError:
        return None
    return int(id_str), u


class Queue:
    """One queue store. Not shared between threads: give each thread its own."""

    def __init__(self, queue_path, visibility_ms=30000, max_attempts=0):
        self.path = os.path.join(queue_path, FILE_NAME)
        self.visibility_ms = visibility_ms
        self.max_attempts = max_attempts  # 0: no dead-letter policy
        if not os.path.exists(self.path):
            raise QueueError("BINDING_SETUP_FAILED",
                             f"open store {self.path!r}: no such file; start `localcloud up` to create it")
        # isolation_level=None: no implicit transactions; BEGIN IMMEDIATE is explicit.
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise QueueError("BINDING_SETUP_FAILED", f"open store {self.path!r}: no format marker ({e})") from None
        if row is None or row[0] != MARKER:
            self.db.close()
            raise QueueError("BINDING_SETUP_FAILED",
                             f"open store {self.path!r}: format is {row and row[0]!r}, want {MARKER!r}")
        # The lock file orders writers fairly with localcloud's; 0600 like the store.
        fd = os.open(os.path.join(queue_path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
        self.lock_file = os.fdopen(fd, "r+b")

    def close(self):
        self.db.close()
        self.lock_file.close()

    @contextmanager
    def _write(self, transaction=True):
        """Holds the lock file (flock, not fcntl locks) around one write."""
        fcntl.flock(self.lock_file, fcntl.LOCK_EX)
        try:
            if not transaction:
                yield self.db
                return
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        finally:
            fcntl.flock(self.lock_file, fcntl.LOCK_UN)

    def send(self, payload):
        """Enqueues a dict/list/number as a json payload, a str as text."""
        if isinstance(payload, str):
            typ, data = "text", payload
        else:
            typ, data = "json", json.dumps(payload, separators=(",", ":"))
        size = len(data.encode("utf-8"))
        if size > MAX_PAYLOAD_BYTES:
            raise QueueError("INVALID_INPUT",
                             f"payload: must be at most {MAX_PAYLOAD_BYTES} bytes serialized, got {size} bytes")
        with self._write(transaction=False) as db:  # one statement: its own transaction
            db.execute(STMT_SEND, (typ, data, now_ms()))

    def receive(self, max_messages=1, visibility_ms=None):
        """Claims up to max_messages due messages; a list of dicts with receipt, attempt, payload."""
        if not 1 <= max_messages <= MAX_RECEIVE_BATCH:
            raise QueueError("INVALID_INPUT", f"max: must be between 1 and {MAX_RECEIVE_BATCH}, got {max_messages}")
        lease = self.visibility_ms if visibility_ms is None else visibility_ms
        if self.db.execute(STMT_ANY, (now_ms(),)).fetchone() is None:
            return []  # an empty poll stays off the write lock
        msgs = []
        with self._write() as db:
            now = now_ms()
            if self.max_attempts:
                due = db.execute(STMT_DUE_UNSPENT, (now, max_messages, self.max_attempts)).fetchall()
            else:
                due = db.execute(STMT_DUE, (now, max_messages)).fetchall()
            for msg_id, enqueued_at in due:
                u = str(uuid.uuid4())  # canonical lower-case
                # fetchall: drive the statement to completion before COMMIT.
                typ, data, attempt = db.execute(STMT_CLAIM, (now + lease, u, msg_id)).fetchall()[0]
                msgs.append({
                    "id": msg_id,
                    "receipt": f"{msg_id}:{u}",
                    "attempt": attempt,
                    "enqueued_at": enqueued_at,
                    "type": typ,
                    "payload": json.loads(data) if typ == "json" else data,
                })
        return msgs

    def _settle(self, stmt, receipt, args, gone_ok):
        parsed = parse_receipt(receipt)
        if parsed is None:
            if gone_ok:
                return  # never issued by a store: a no-op, as localcloud does
            raise QueueError("INVALID_INPUT", f"receipt: {receipt!r} is not a receipt handle ({{id}}:{{uuid}})")
        msg_id, u = parsed
        with self._write() as db:
            if db.execute(stmt, (msg_id, u) + args).rowcount == 1:
                return
            if db.execute(STMT_EXISTS, (msg_id,)).fetchone() is not None:
                raise StaleReceipt(receipt)
        if not gone_ok:
            raise QueueError("QUEUE_OPERATION_FAILED", f"extend receipt {receipt!r}: message not found")

    def ack(self, receipt):
        """Deletes the message; gone already is fine, a stale receipt raises StaleReceipt."""
        self._settle(STMT_ACK, receipt, (), gone_ok=True)

    def nack(self, receipt, delay_ms=0):
        """Makes the message due again (after delay_ms), keeping its attempt count."""
        self._settle(STMT_NACK, receipt, (now_ms() + delay_ms,), gone_ok=True)

    def extend(self, receipt, lease_ms):
        """Keeps the message hidden until lease_ms from now; the receipt stays valid."""
        self._settle(STMT_NACK, receipt, (now_ms() + lease_ms,), gone_ok=False)


def runtime_addr(path, trusted_host=None):
    """Returns (host, port) of natsUrl in up's runtime.json at path, or None.

    The file is untrusted: only a nats://host:port URL without credentials
    whose host is loopback (or trusted_host, the given URL's) is used, as
    the connection carries the hint token.
    """
    try:
        with open(path, "rb") as f:
            rt = json.loads(f.read(64 * 1024))
        u = urllib.parse.urlparse(rt.get("natsUrl") or "")
        port = u.port
    except (OSError, ValueError, AttributeError):
        return None
    host = u.hostname or ""
    loopback = host == "localhost" or host == "::1" or host.startswith("127.")
    if u.scheme != "nats" or u.username or not port or not (loopback or (trusted_host and host == trusted_host)):
        return None
    return (host, port)


class HintListener:
    """A minimal NATS subscriber: sets `event` on every hint for subject.

    Hints are lossy, so the event is also set after every (re)connect:
    anything sent while not subscribed is picked up by one claim.

    With runtime_file (LOCALCLOUD_RUNTIME_FILE, up's runtime.json), every
    connection attempt first reads the server's URL there, so an up
    restarted on another port is found again; url may then be None (a
    stack on port 0 whose up has not started yet).
    """

    def __init__(self, url, subject, token=None, on_state=None, runtime_file=None):
        self.addr = None
        if url:
            u = urllib.parse.urlparse(url)
            self.addr = (u.hostname or "127.0.0.1", u.port or 4222)
        self.runtime_file = runtime_file or None
        self.subject = subject
        self.token = token or None
        self.on_state = on_state or (lambda state: None)
        self.event = threading.Event()
        self.hints = 0
        self._stop = threading.Event()
        self._sock = None
        self._down = False  # said "disconnected" since the last subscription
        self._thread = threading.Thread(target=self._run, name="nats-hints", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        s = self._sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=2)

    def _run(self):
        backoff = 0.05
        while not self._stop.is_set():
            try:
                self._session()
                backoff = 0.05
            except (OSError, ValueError, ConnectionError) as e:
                if not self._down and not self._stop.is_set():  # once per outage, not once per retry
                    self._down = True
                    self.on_state(f"disconnected: {e}; retrying")
            if self._stop.wait(backoff * random.uniform(0.8, 1.2)):
                return
            # A restarted up is back within a fraction of a second: keep
            # looking every quarter second, like localcloud's Go client.
            backoff = min(backoff * 2, 0.25)

    def _server(self):
        """The address to dial now: runtime.json's, else the given URL's."""
        if self.runtime_file:
            addr = runtime_addr(self.runtime_file, self.addr[0] if self.addr else None)
            if addr is not None:
                return addr
        if self.addr is None:
            raise ConnectionError(f"no hint server known yet ({self.runtime_file} names none)")
        return self.addr

    def _session(self):
        with socket.create_connection(self._server(), timeout=5) as s:
            self._sock = s
            f = s.makefile("rb")
            line = f.readline()
            if not line.startswith(b"INFO "):
                raise ValueError(f"want INFO from the server, got {line[:80]!r}")
            opts = {"verbose": False, "pedantic": False, "name": "localcloud-python-example"}
            if self.token:
                opts["auth_token"] = self.token
            s.sendall(b"CONNECT " + json.dumps(opts).encode() + b"\r\n"
                      + f"SUB {self.subject} 1\r\n".encode() + b"PING\r\n")
            s.settimeout(None)  # the server PINGs idle clients; we answer
            subscribed = False
            while not self._stop.is_set():
                line = f.readline()
                if not line:
                    raise ConnectionError("connection closed by the server")
                if line.startswith(b"MSG "):
                    # MSG <subject> <sid> [reply-to] <bytes>
                    size = int(line.split()[-1])
                    f.read(size + 2)  # the payload and its \r\n; any message is a hint
                    self.hints += 1
                    self.event.set()
                elif line.startswith(b"PING"):
                    s.sendall(b"PONG\r\n")
                elif line.startswith(b"PONG") and not subscribed:
                    subscribed = True  # the server has processed SUB
                    self._down = False
                    self.on_state("subscribed")
                    self.event.set()  # claim once: hints sent before now are lost
                elif line.startswith(b"-ERR"):
                    raise ConnectionError(line.decode(errors="replace").strip())
                # +OK and INFO updates need nothing.
