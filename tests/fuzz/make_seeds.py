#!/usr/bin/env python3
"""Writes the seed inputs of tests/fuzz/corpus/ (a few valid inputs per
target).  The entry seeds come from a real log: pass a berthd data
directory's log.db (optional; without it the entry seeds are kept)."""

import os
import sqlite3
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint((num << 3) | 2) + varint(len(value)) + value


def fields(data):
    """(number, wire type, value) of a protobuf message's top-level fields."""
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(data, i)
        elif wt == 2:
            n, i = read_varint(data, i)
            v, i = data[i:i + n], i + n
        elif wt == 1:
            v, i = data[i:i + 8], i + 8
        elif wt == 5:
            v, i = data[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def read_varint(data, i):
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def fnv(name):
    h = 1469598103934665603
    for c in name.encode():
        h ^= c
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "hp-%016x" % h


# spec: the README's example and the test suites' shapes.
write("spec", "yaml", """id: db
plugin_id: hostpath
capabilities:
  - access_mode: single-node-writer
    attachment_mode: file-system
capacity_min: 1GiB
secrets:
  token: s3cr3t
""")
write("spec", "json", '{"id": "db", "plugin_id": "manual", "external_id": "vol-1", '
      '"capabilities": [{"access_mode": "multi-node-multi-writer", '
      '"attachment_mode": "file-system"}], "mount_options": {"fs_type": "ext4", '
      '"mount_flags": ["noatime"]}, "parameters": {"size": "1G"}}')
write("spec", "topology", """id: t1
namespace: prod
name: "T 1"
plugin_id: hostpath
capabilities: [{access_mode: multi-node-reader-only, attachment_mode: block-device}]
topology_request:
  required: [{segments: {zone: a}}]
  preferred: [{segments: {zone: b, rack: "7"}}]
capacity_min: 10GiB
capacity_max: 20000000000
context: {a: b}
""")

# shell: lines as typed in the interactive shell.
for name, line in [
        ("claim", "volume claim db --alloc web-1 --node n1 --read-only"),
        ("register", "--json volume register -"),
        ("quoted", "--namespace 'prod x' volume status \"d\\\"b\""),
        ("fingerprint", "plugin fingerprint hostpath --node n1 --type monolith --unhealthy"),
        ("raft", "operator raft transfer-leadership s2"),
        ("help", "volume claim --help"),
        ("deregister", "volume deregister db --force"),
        ("snapshot", "operator snapshot save /tmp/x.snap")]:
    write("shell", name, line)

# hostpath: call sequences (selector, 2-byte length, request).
CAP = field(2, b"") + field(3, field(1, 1))  # mount, SINGLE_NODE_WRITER
VID = fnv("v1")


def call(selector, request):
    return bytes([selector]) + struct.pack("<H", len(request)) + request


write("hostpath", "create-stage-publish",
      call(3, field(1, "v1") + field(2, field(1, 1 << 20)) + field(3, CAP)) +
      call(5, field(1, VID) + field(2, "n1") + field(3, CAP)) +
      call(11, field(1, VID) + field(3, "/stage") + field(4, CAP)) +
      call(13, field(1, VID) + field(3, "/stage") + field(4, "/target") + field(5, CAP)) +
      call(15, field(1, VID) + field(2, "/target")) +
      call(14, field(1, VID) + field(2, "/target")) +
      call(12, field(1, VID) + field(2, "/stage")) +
      call(6, field(1, VID) + field(2, "n1")) +
      call(4, field(1, VID)))
write("hostpath", "identity", call(0, b"") + call(1, b"") + call(2, b"") + call(10, b"") +
      call(16, b"") + call(9, b"") + call(8, b""))
write("hostpath", "validate", call(3, field(1, "v1") + field(3, CAP)) +
      call(7, field(1, VID) + field(3, CAP)))

# entry: a restore (operator snapshot restore) of a tiny state database
# (512-byte pages, to stay under make fuzz's -max_len).
tmp = os.path.join(HERE, "corpus", ".restore.db")
if os.path.exists(tmp):
    os.remove(tmp)
db = sqlite3.connect(tmp)
db.executescript(
    "PRAGMA page_size=512;"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);"
    "INSERT INTO meta VALUES('format_version', '1');"
    "INSERT INTO meta VALUES('applied_index', '1');"
    "CREATE TABLE volumes(namespace TEXT NOT NULL, id TEXT NOT NULL, plugin_id TEXT NOT NULL,"
    " modify_index INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY(namespace, id));")
db.commit()
db.execute("VACUUM")
db.close()
with open(tmp, "rb") as f:
    state_db = f.read()
os.remove(tmp)
write("entry", "restore-state", field(1, 1) + field(2, field(9, state_db)))

# entry: the v1::LogEntry bytes inside a real log's raft entries.
if len(sys.argv) > 1:
    db = sqlite3.connect(sys.argv[1])
    n = 0
    for idx, data in db.execute("SELECT idx, data FROM entries ORDER BY idx"):
        payload = [v for num, wt, v in fields(data) if num == 4]
        etype = [v for num, wt, v in fields(data) if num == 3]
        if payload and payload[0] and not etype:  # ENTRY_NORMAL (0) is not encoded
            write("entry", "log-%03d" % idx, payload[0])
            n += 1
    print("wrote %d entry seeds" % n)
