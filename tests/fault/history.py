"""A Jepsen-style history: every operation's invocation and completion.

Each event is a dict
    {"index": N, "op": OP-ID, "type": "invoke" | "ok" | "fail" | "info",
     "process": WORKER, "f": KIND, "value": {...}, "time": SECONDS,
     "exit": CODE, "error": TEXT}
where "info" means the outcome is unknown (timed out, connection lost, or an
error that does not say whether the change was made). `time` is seconds
since the history started (time.monotonic()), `wall` the epoch time (to line
up with the plugins' call logs, whose `at_ns` is epoch nanoseconds). The history is appended to
from many threads and written as one JSON object per line."""

import json
import threading
import time


class History:
    def __init__(self, path=None):
        self.events = []
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.wall_start = time.time()
        self.next_op = 0
        self.file = open(path, "w") if path else None

    def now(self):
        return time.monotonic() - self.start

    def _append(self, event):
        event["wall"] = time.time()  # to line up with the call logs' at_ns
        with self.lock:
            event["index"] = len(self.events)
            self.events.append(event)
            if self.file:
                self.file.write(json.dumps(event, sort_keys=True) + "\n")
                self.file.flush()
        return event

    def invoke(self, process, f, value):
        with self.lock:
            op = self.next_op
            self.next_op += 1
        self._append({"op": op, "type": "invoke", "process": process, "f": f,
                      "value": dict(value), "time": self.now()})
        return op

    def complete(self, op, process, f, value, outcome, exit_code=None, error=""):
        assert outcome in ("ok", "fail", "info"), outcome
        return self._append({"op": op, "type": outcome, "process": process, "f": f,
                             "value": dict(value), "time": self.now(), "exit": exit_code,
                             "error": error})

    def note(self, kind, **fields):
        """A nemesis or phase marker: {"type": "nemesis", "f": kind, ...}."""
        return self._append({"type": "nemesis", "f": kind, "value": fields,
                             "time": self.now()})

    def close(self):
        if self.file:
            self.file.close()
            self.file = None


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def pair(events):
    """The operations of a history: {op: {"invoke": event, "complete": event|None}}."""
    ops = {}
    for e in events:
        if "op" not in e:
            continue
        entry = ops.setdefault(e["op"], {"invoke": None, "complete": None})
        if e["type"] == "invoke":
            entry["invoke"] = e
        else:
            entry["complete"] = e
    return ops
