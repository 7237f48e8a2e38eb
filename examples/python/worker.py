"""A Consume-like worker: claims messages from a queue binding, handles and acks them.

Run it with the stack's environment:

    localcloud run -f examples/stack.yaml -- python3 examples/python/worker.py

It wakes on a NATS hint the moment a message is sent (when `localcloud up` runs)
and polls as a fallback. Each handled message is printed as one line:

    handled id=7 attempt=1 woke=hint payload={"id":"py-1"}
"""

import argparse
import json
import os
import random
import signal
import sys
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ beside the example

import lcqueue  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binding", default="orders", help="queue binding name (default orders)")
    ap.add_argument("--poll", type=float, default=1.0, help="fallback poll in seconds (default 1)")
    ap.add_argument("--batch", type=int, default=4, help="messages per claim, 1..10 (default 4)")
    ap.add_argument("--work-ms", type=int, default=0, help="pretend each message takes this long")
    args = ap.parse_args()

    try:
        b = lcqueue.read_binding(args.binding)
        q = lcqueue.Queue(b["queuePath"], b["visibilityTimeoutMs"], b["maxAttempts"])
    except lcqueue.QueueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1

    hints = None
    url = os.environ.get("LOCALCLOUD_NATS_URL")
    # up rewrites runtime.json with its NATS URL at every start: reading it
    # again after a disconnect finds an up restarted on another port.
    runtime_file = os.environ.get("LOCALCLOUD_RUNTIME_FILE")
    if (url or runtime_file) and b.get("subject"):
        hints = lcqueue.HintListener(url, b["subject"], os.environ.get("LOCALCLOUD_NATS_TOKEN"),
                                     on_state=lambda s: print(f"worker: hints {s}", flush=True),
                                     runtime_file=runtime_file)
    else:
        print("worker: neither LOCALCLOUD_NATS_URL nor LOCALCLOUD_RUNTIME_FILE; polling only", flush=True)
    # wake is what the loop waits on: a hint, or a signal to stop.
    wake = hints.event if hints is not None else threading.Event()
    stop = threading.Event()

    def on_signal(*_):
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if hints is not None:
        hints.start()
    print(f"worker: waiting on {args.binding} (lease {b['visibilityTimeoutMs']} ms, poll {args.poll}s)", flush=True)

    woke = "start"
    while not stop.is_set():
        try:
            msgs = q.receive(args.batch)
        except lcqueue.QueueError as e:
            print(f"worker: receive: {e}", file=sys.stderr, flush=True)
            msgs = []
        for m in msgs:
            handle(q, m, woke, args.work_ms, b["visibilityTimeoutMs"])
        if len(msgs) == args.batch:
            woke = "more"  # a full claim: more is likely due, claim again at once
            continue
        # Wait for a hint or the jittered fallback poll, whichever comes first.
        timeout = args.poll * random.uniform(0.8, 1.2)
        woke = "hint" if wake.wait(timeout) else "poll"
        wake.clear()
    if hints is not None:
        hints.stop()
    q.close()
    print("worker: stopped", flush=True)
    return 0


def handle(q, m, woke, work_ms, lease_ms):
    """Handles one message, extending its lease every third of it while it works."""
    done = threading.Event()

    def keep_lease():
        while not done.wait(lease_ms / 3000):
            try:
                q_keep.extend(m["receipt"], lease_ms)
            except lcqueue.QueueError as e:
                print(f"worker: extend {m['id']}: {e}", file=sys.stderr, flush=True)
                return

    keeper = None
    if work_ms > lease_ms / 3:
        # sqlite3 connections belong to one thread: the keeper opens its own.
        q_keep = lcqueue.Queue(os.path.dirname(q.path), lease_ms)
        keeper = threading.Thread(target=keep_lease, daemon=True)
        keeper.start()
    try:
        time.sleep(work_ms / 1000)
        payload = json.dumps(m["payload"], separators=(",", ":")) if m["type"] == "json" else m["payload"]
        print(f"handled id={m['id']} attempt={m['attempt']} woke={woke} payload={payload}", flush=True)
    except Exception as e:  # a failed handler: redeliver now
        print(f"worker: handle {m['id']}: {e}", file=sys.stderr, flush=True)
        q.nack(m["receipt"])
        return
    finally:
        done.set()
        if keeper is not None:
            keeper.join()
            q_keep.close()
    try:
        q.ack(m["receipt"])
    except lcqueue.StaleReceipt as e:
        print(f"worker: ack {m['id']}: {e}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
