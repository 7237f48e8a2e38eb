"""A producer: sends N JSON messages {"id": "<prefix>-<i>"} to a queue binding.

    localcloud run -f examples/stack.yaml -- python3 examples/python/producer.py -n 20

It publishes no hints itself: `localcloud up` notices the write and wakes
the consumers (docs/FORMAT.md, "Wake-up hints").
"""

import argparse
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ beside the example

import lcqueue  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binding", default="orders", help="queue binding name (default orders)")
    ap.add_argument("-n", type=int, default=20, help="how many messages (default 20)")
    ap.add_argument("--prefix", default="py", help="id prefix (default py)")
    args = ap.parse_args()
    try:
        b = lcqueue.read_binding(args.binding)
        q = lcqueue.Queue(b["queuePath"], b["visibilityTimeoutMs"], b["maxAttempts"])
        try:
            for i in range(1, args.n + 1):
                q.send({"id": f"{args.prefix}-{i}"})
                print(f"sent id={args.prefix}-{i} at={lcqueue.now_ms()}", flush=True)
        finally:
            q.close()
    except lcqueue.QueueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    print(f"sent {args.n} messages", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
