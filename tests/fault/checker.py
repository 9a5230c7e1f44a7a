"""The fault suite's checker: pure functions from what a run observed to a
list of violations. No processes, no clock: tests/fault/test_checker.py
feeds it synthetic observations with known violations.

An observation is a dict:

  volumes     {VOLUME: {"access_mode": MODE, "external_id": ID}}
  events      the history (history.py): workload operations, then the
              operator's releases after healing (process "heal")
  heal_time   history time at which the faults stopped and healing began
  release_bound  seconds after heal_time by which every release must be done
  samples     [{"time": T, "volumes": [volume status --json...]}] read during the run
  settled     `volume status --json` once faults stopped and the cluster healed,
              before the operator's releases (the committed state that check 1 reads)
  final       `volume status --json` after the operator's releases (check 3)
  drained     optional: `volume status --json` after every remaining claim was
              released (then no publication may remain at the plugins)
  call_logs   {CSI-NODE-ID: [call log entries of the plugin on that node]}
  tables      optional: [(SERVER, state tables)] read with the servers stopped
  converge_error  optional: why the servers did not reach one applied index
  csi_nodes   optional: {NODE: CSI-NODE-ID} (berth's node name, its plugin's
              node id; default: the same)
  writes      optional: {VOLUME: [[NODE, ALLOC, NS]...]}, the lines the allocs
              appended to the volume's `log` (NS: epoch ns taken just before
              the append; workload.writer_command); without it check 6 is skipped
  unwritten   optional: [[VOLUME, NODE, ALLOC, NS]...], the allocs' appends
              that failed because the volume was no longer mounted at its path
  unread      optional: the same for volumes claimed read-only whose directory
              was gone while the alloc ran
  survivors   optional: [[NODE, ALLOC]...], alloc commands still running once
              every alloc was stopped (or had ended) in the servers' view
  ended_allocs  optional: {ALLOC: {"state", "message"}}, allocs the servers
              saw end without a stop: lost (their node marked down), failed by
              their node's fence, or stopped by a drain of their node (their
              claims are released without a stop of the workload's)

The history's nemesis notes `partition-client` / `rejoin-client` (value
{"process": CLIENT, "alloc", "volume"}; `wall`: epoch seconds) mark a client
cut off from every server: its claims may be released without it
(node-detached), so what it still has published or staged is stale until it
comes back and unmounts it (checks 4 allow that, except for a write
publication of a single-writer volume, which its fence must have undone).

Operations are pluggable by name: ACQUIRE kinds take volumes for an alloc
(value {"alloc", "node", "volumes": [{"volume", "read_only"}]}), RELEASE
kinds give back every volume the alloc took (value {"alloc"}).

The checks, numbered as in docs/testing.md:
  1 no acknowledged claim or release is lost (settled state)
  2 a single-writer volume never has two writers: in the committed state
    (samples, settled, final) and at the plugins (live non-readonly
    NodePublishVolume publications, replayed from the call logs)
  3 every claim whose release was invoked is freed within the bound after
    the faults stopped
  4 the CSI calls of every volume come in the spec's order, per node and path;
    an acknowledged release was answered only after its publication was undone
  5 every server's state tables are identical at the same applied index
  6 an alloc writes only while it is published and, for a single-writer
    volume, alone: every line in a volume's log lies within a write
    publication of that alloc on its node and within no other write
    publication of the volume; no alloc still runs after its volume was
    unpublished (a failed append); for every partition-client fault, the
    cut-off client's writes and its publication of the volume ended before
    another node published it. Not vacuous: an acknowledged writer means lines,
    and a run with partition-client faults must have moved a cut-off writer's
    volume at least once
"""

import bisect


ACQUIRE = {"claim", "alloc-run"}
RELEASE = {"release", "alloc-stop"}

SINGLE_WRITER = {"single-node-writer", "multi-node-single-writer", "single-node-single-writer"}

NODE_CALLS = {"NodeStageVolume", "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume"}
CONTROLLER_CALLS = {"ControllerPublishVolume", "ControllerUnpublishVolume"}


class Violation:
    def __init__(self, check, what, detail=""):
        self.check = check
        self.what = what
        self.detail = detail

    def __str__(self):
        s = "violation [check %d] %s" % (self.check, self.what)
        if self.detail:
            s += "\n    " + "\n    ".join(str(self.detail).splitlines())
        return s

    __repr__ = __str__


# --- the history as allocs -------------------------------------------------

def operations(events):
    """[(invoke, complete-or-None)] in invocation order."""
    ops = {}
    order = []
    for e in events:
        if "op" not in e:
            continue
        if e["type"] == "invoke":
            ops[e["op"]] = [e, None]
            order.append(e["op"])
        elif e["op"] in ops:
            ops[e["op"]][1] = e
    return [tuple(ops[o]) for o in order]


class Alloc:
    def __init__(self, alloc):
        self.id = alloc
        self.acquires = []   # (invoke, complete)
        self.releases = []   # (invoke, complete)
        self.volumes = {}    # VOLUME -> read_only
        self.node = None

    def outcome(self, pair):
        return pair[1]["type"] if pair[1] else "info"

    def acked_acquire(self):
        return any(self.outcome(p) == "ok" for p in self.acquires)

    def release_invoked(self):
        return bool(self.releases)

    def acked_release(self):
        return next((p for p in self.releases if self.outcome(p) == "ok"), None)


def allocs_of(events):
    allocs = {}
    for inv, comp in operations(events):
        f, v = inv["f"], inv["value"]
        if f not in ACQUIRE and f not in RELEASE:
            continue
        a = allocs.setdefault(v["alloc"], Alloc(v["alloc"]))
        if f in ACQUIRE:
            a.acquires.append((inv, comp))
            a.node = v.get("node")
            for vol in v.get("volumes", []):
                a.volumes[vol["volume"]] = bool(vol.get("read_only"))
        else:
            a.releases.append((inv, comp))
    return allocs


def claims_in(state):
    """{(VOLUME, ALLOC): claim} of a `volume status --json` list."""
    out = {}
    for vol in state or []:
        for c in vol.get("claims", []):
            out[(vol["id"], c["alloc_id"])] = c
    return out


def short(pair):
    inv, comp = pair
    s = "op %s %s %s invoked t=%.3f" % (inv["op"], inv["f"], inv["value"], inv["time"])
    if comp:
        s += ", %s t=%.3f" % (comp["type"], comp["time"])
        if comp.get("exit") is not None:
            s += " exit %s" % comp["exit"]
        if comp.get("error"):
            s += " (%s)" % comp["error"].strip()[:300]
    else:
        s += ", never completed"
    return s


# --- check 1: acknowledged operations ----------------------------------------

def check_acks(obs):
    out = []
    settled = obs.get("settled")
    if settled is None:
        return [Violation(1, "no settled state was read after the faults stopped")]
    present = claims_in(settled)
    workload = [e for e in obs["events"] if e.get("process") != "heal"]
    for a in allocs_of(workload).values():
        for vol, ro in a.volumes.items():
            claim = present.get((vol, a.id))
            # Ended by its node (lost, or stopped by the node's fence): the
            # servers release its claims without a stop.
            if a.acked_acquire() and not a.release_invoked() and \
                    not ended_by_node(obs, a.id):
                ack = next(p for p in a.acquires if a.outcome(p) == "ok")
                if claim is None:
                    out.append(Violation(1, "acknowledged claim lost: alloc %s on volume %s"
                                         % (a.id, vol), short(ack)))
                elif claim["state"] != "taken":
                    out.append(Violation(1, "acknowledged claim of alloc %s on volume %s is in "
                                         "state %s though no release was invoked"
                                         % (a.id, vol, claim["state"]), short(ack)))
                elif claim["mode"] != ("read" if ro else "write") or \
                        (a.node and claim["node_id"] != a.node):
                    out.append(Violation(1, "acknowledged claim of alloc %s on volume %s has "
                                         "mode %s on node %s" % (a.id, vol, claim["mode"],
                                                                 claim["node_id"]), short(ack)))
            rel = a.acked_release()
            if rel and claim is not None:
                # A claim whose outcome is unknown may still take effect
                # after the release (it was never acknowledged): only an
                # alloc whose every claim completed before is a lost release.
                if all(a.outcome(p) != "info" and p[1]["time"] < rel[0]["time"]
                       for p in a.acquires):
                    out.append(Violation(1, "acknowledged release lost: alloc %s still holds "
                                         "volume %s (state %s)" % (a.id, vol, claim["state"]),
                                         short(rel)))
            if a.acquires and all(a.outcome(p) == "fail" for p in a.acquires) and \
                    claim is not None and claim["state"] == "taken":
                out.append(Violation(1, "failed claim took effect: alloc %s holds volume %s"
                                     % (a.id, vol), short(a.acquires[-1])))
    return out


def ended_by_node(obs, alloc):
    """Ended by its node or the nemesis, not by a stop of the workload's:
    lost, failed by its node's fence, or stopped by a drain of its node
    (drain-client; its claims are released once its client stopped it)."""
    e = obs.get("ended_allocs", {}).get(alloc)
    if not e:
        return False
    message = e.get("message", "")
    return (e.get("state") == "lost" or
            (e.get("state") == "failed" and "fence" in message) or
            (e.get("state") in ("complete", "failed") and "by the drain of node" in message))


# --- partitions of a client --------------------------------------------------

def ns(wall):
    return int(round(wall * 1e9))


def client_cuts(obs):
    """The partition-client faults in order: [{"client", "node" (its CSI
    node id), "alloc" (the writer the nemesis ran there, or None), "volume",
    "cut", "rejoin" (epoch ns; None: never healed), "moved" (the nemesis'
    own view)}] from the history's nemesis notes."""
    csi = obs.get("csi_nodes", {})
    out = []
    for e in obs.get("events", []):
        if e.get("type") != "nemesis" or "wall" not in e:
            continue
        v = e.get("value", {})
        if e["f"] == "partition-client":
            out.append({"client": v.get("process"),
                        "node": csi.get(v.get("process"), v.get("process")),
                        "alloc": v.get("alloc"), "volume": v.get("volume"),
                        "mode": v.get("mode", "proxies"),
                        "cut": ns(e["wall"]), "rejoin": None, "moved": None})
        elif e["f"] == "rejoin-client":
            for c in reversed(out):
                if c["client"] == v.get("process") and c["rejoin"] is None:
                    c["rejoin"] = ns(e["wall"])
                    c["moved"] = v.get("moved")
                    break
    return out


def stale_at(cuts, node, since, at):
    """Whether what `node` has had since `since` (a publication, a staging)
    may be stale at `at`: its client was cut off from the servers while it
    had it, before `at`, so the servers may have marked the node down and
    released the claim without it (node-detached); the node unmounts it
    when it comes back (the drained check still fails on what is left).
    What a client cut off only from the servers it connects to got through
    the leader's own connection to it during the cut counts too."""
    return any(c["node"] == node and c["cut"] <= at and
               (c["rejoin"] is None or since < c["rejoin"]) for c in cuts)


def single_writer_ext(obs):
    return {v["external_id"] for v in obs["volumes"].values()
            if v.get("external_id") and v.get("access_mode") in SINGLE_WRITER}


# --- check 2: single writer ------------------------------------------------

def writers_in(state, volumes):
    """[(VOLUME, [claims])] of single-writer volumes with more than one writer."""
    out = []
    for vol in state or []:
        mode = volumes.get(vol["id"], {}).get("access_mode")
        if mode not in SINGLE_WRITER:
            continue
        w = [c for c in vol.get("claims", []) if c.get("mode") == "write"]
        if len(w) > 1:
            out.append((vol["id"], w))
    return out


def check_single_writer_committed(obs):
    out = []
    reads = [("sample t=%.3f" % s["time"], s["volumes"]) for s in obs.get("samples", [])]
    for name in ("settled", "final", "drained"):
        if obs.get(name) is not None:
            reads.append((name + " state", obs[name]))
    for label, state in reads:
        for vol, w in writers_in(state, obs["volumes"]):
            out.append(Violation(2, "two writers of single-writer volume %s in the committed "
                                 "state (%s)" % (vol, label),
                                 "; ".join("alloc %s on %s (%s)" % (c["alloc_id"], c["node_id"],
                                                                    c["state"]) for c in w)))
    return out


def merged_calls(call_logs):
    """Every logged call as (at_ns, node, seq, entry), in the order the plugins
    served them (their shared root's lock serializes them). A line without a
    timestamp (its call failed before taking the lock) keeps its file order."""
    calls = []
    for node, entries in call_logs.items():
        last = 0
        for seq, e in enumerate(entries):
            at = e.get("at_ns", last)
            last = at
            calls.append((at, node, seq, e))
    calls.sort(key=lambda c: (c[0], c[1], c[2]))
    return calls


def check_single_writer_plugin(obs):
    out = []
    by_ext = {v["external_id"]: vid for vid, v in obs["volumes"].items() if v.get("external_id")}
    live = {}  # VOLUME -> {(node, target): at_ns}
    reported = set()
    for at, node, _, e in merged_calls(obs.get("call_logs", {})):
        vid = by_ext.get(e.get("volume_id"))
        if vid is None or e.get("code") != 0:
            continue
        if obs["volumes"][vid].get("access_mode") not in SINGLE_WRITER:
            continue
        key = (node, e.get("target_path"))
        pubs = live.setdefault(vid, {})
        if e["method"] == "NodePublishVolume" and not e.get("readonly"):
            pubs[key] = at
            if len(pubs) > 1 and (vid, frozenset(pubs)) not in reported:
                reported.add((vid, frozenset(pubs)))
                out.append(Violation(2, "two live write publications of single-writer volume %s "
                                     "at the plugins" % vid,
                                     "\n".join("node %s target %s published at_ns=%d" % (n, t, a)
                                               for (n, t), a in sorted(pubs.items()))))
        elif e["method"] == "NodeUnpublishVolume":
            pubs.pop(key, None)
    return out


# --- check 3: releases finish ------------------------------------------------

def check_releases_freed(obs):
    out = []
    final = obs.get("final")
    if final is None:
        return [Violation(3, "no final state was read after the operator's releases")]
    present = claims_in(final)
    settled = claims_in(obs.get("settled"))
    bound = obs.get("release_bound", 60)
    heal = obs.get("heal_time", 0)
    allocs = allocs_of(obs["events"])
    must_free = set()
    for a in allocs.values():
        # A stop that found no such alloc after a run of unknown outcome
        # released nothing: that run may still take effect afterwards (the
        # drain releases it).
        if a.release_invoked() and not (
                all(a.outcome(p) == "fail" for p in a.releases) and not a.acked_acquire()):
            must_free.add(a.id)
    # A claim left in release (e.g. a failed claim whose unwinding failed)
    # is released again by the operator and must be freed too.
    for (vol, alloc), c in settled.items():
        if c["state"] != "taken":
            must_free.add(alloc)
    for alloc in sorted(must_free):
        a = allocs.get(alloc)
        for (vol, al), c in present.items():
            if al != alloc:
                continue
            last = a.releases[-1] if a and a.releases else None
            out.append(Violation(3, "release wedged: alloc %s still holds volume %s (state %s) "
                                 "after the operator released it again for up to %.0f s"
                                 % (alloc, vol, c["state"], bound),
                                 short(last) if last else "no release of it was recorded"))
        if a and a.releases:
            done = [p for p in a.releases if p[1] and p[1]["type"] in ("ok", "fail")]
            late = [p for p in done if p[1]["time"] > heal + bound]
            if done and len(late) == len(done):
                out.append(Violation(3, "release of alloc %s completed only %.1f s after the "
                                     "faults stopped (bound %.0f s)"
                                     % (alloc, late[0][1]["time"] - heal, bound), short(late[0])))
    return out


# --- check 4: CSI call order -------------------------------------------------

def check_csi_order(obs):
    """Replays the plugins' calls (merged by the time each took the shared
    root's lock) and checks every call the CO issued, whatever its answer,
    against what was done before: ControllerPublishVolume before
    NodeStageVolume (the plugin requires it), NodeStageVolume before
    NodePublishVolume at that staging path, NodeUnpublishVolume of every
    target before NodeUnstageVolume of its staging path, and no
    ControllerUnpublishVolume while the volume is staged or published on that
    node."""
    out = []
    cpub = set()        # (volume_id, node)
    staged = {}         # (node, staging path) -> (volume_id, at_ns)
    pubs = {}           # (node, target path) -> (volume_id, staging path, at_ns, readonly)
    cuts = client_cuts(obs)
    sw = single_writer_ext(obs)
    for at, node, seq, e in merged_calls(obs.get("call_logs", {})):
        m = e.get("method")
        vid = e.get("volume_id")
        ok = e.get("code") == 0
        where = "%s call #%d on node %s at_ns=%d: %s" % (m, seq + 1, node, at,
                                                          {k: e[k] for k in sorted(e)})
        if m == "ControllerPublishVolume":
            if ok:
                cpub.add((vid, e.get("node_id")))
        elif m == "ControllerUnpublishVolume":
            # A node cut off since it staged or published may have been
            # released without it: stale, except a write publication of a
            # single-writer volume (its fence must have undone that first).
            target = e.get("node_id")
            busy = [("staged", p) for (n, p), (v, since) in staged.items()
                    if v == vid and (not target or n == target) and
                    not stale_at(cuts, n, since, at)] + \
                   [("published", p) for (n, p), (v, _, since, ro) in pubs.items()
                    if v == vid and (not target or n == target) and
                    not (stale_at(cuts, n, since, at) and (ro or v not in sw))]
            if busy:
                out.append(Violation(4, "ControllerUnpublishVolume of %s from node %s while it "
                                     "is still %s there" % (vid, target, busy[0][0]),
                                     where + "\n" + "\n".join("%s %s" % b for b in busy)))
            if ok:
                for k in [k for k in cpub if k[0] == vid and (not target or k[1] == target)]:
                    cpub.discard(k)
        elif m == "NodeStageVolume":
            if (vid, node) not in cpub:
                out.append(Violation(4, "NodeStageVolume of %s on node %s before "
                                     "ControllerPublishVolume to that node" % (vid, node), where))
            if ok:  # staged again (idempotent): it is staged since the first
                key = (node, e.get("staging_target_path"))
                if staged.get(key, (None,))[0] != vid:
                    staged[key] = (vid, at)
        elif m == "NodePublishVolume":
            s = e.get("staging_target_path")
            if staged.get((node, s), (None,))[0] != vid:
                out.append(Violation(4, "NodePublishVolume of %s on node %s at a staging path "
                                     "where it is not staged" % (vid, node), where))
            if ok:
                key = (node, e.get("target_path"))
                if pubs.get(key, (None,))[0] != vid:
                    pubs[key] = (vid, s, at, bool(e.get("readonly")))
        elif m == "NodeUnpublishVolume":
            if ok:
                pubs.pop((node, e.get("target_path")), None)
        elif m == "NodeUnstageVolume":
            s = e.get("staging_target_path")
            users = [t for (n, t), (v, st, _, _) in pubs.items()
                     if n == node and st == s and v == vid]
            if users:
                out.append(Violation(4, "NodeUnstageVolume of %s on node %s before "
                                     "NodeUnpublishVolume of %d publication(s) using it"
                                     % (vid, node, len(users)), where + "\n" + "\n".join(users)))
            if ok:
                staged.pop((node, s), None)
    # Once a volume's claims are all released, nothing of it may stay
    # published or staged.
    drained = obs.get("drained")
    if drained is not None:
        claimed = {vol for vol, _ in claims_in(drained)}
        by_ext = {v["external_id"]: vid for vid, v in obs["volumes"].items()
                  if v.get("external_id") and vid not in claimed}
        for (n, t), (v, _, _, _) in sorted(pubs.items()):
            if v in by_ext:
                out.append(Violation(4, "publication of volume %s left behind on node %s after "
                                     "every claim was released" % (by_ext[v], n), t))
        for (n, p), (v, _) in sorted(staged.items()):
            if v in by_ext:
                out.append(Violation(4, "staging of volume %s left behind on node %s after "
                                     "every claim was released" % (by_ext[v], n), p))
    return out


def alloc_of_target(path):
    """The alloc of a target path: berth's node actor publishes each claim at
    CSI-ROOT/per-alloc/ALLOC/NAMESPACE/VOLUME/MODE."""
    parts = (path or "").split("/per-alloc/", 1)
    return parts[1].split("/", 1)[0] if len(parts) == 2 else None


def check_release_unpublished(obs):
    """An acknowledged release has unpublished its claim: every publication
    of that alloc's volume the plugins made before the release was answered
    was unpublished before the answer (history `wall` vs call log `at_ns`)."""
    out = []
    by_ext = {v["external_id"]: vid for vid, v in obs["volumes"].items() if v.get("external_id")}
    sw = {by_ext[x] for x in single_writer_ext(obs)}
    cuts = client_cuts(obs)
    live = {}  # (alloc, volume) -> {(node, target): (at_ns, readonly)}
    events = []
    for at, node, _, e in merged_calls(obs.get("call_logs", {})):
        if e.get("code") == 0 and e.get("method") in ("NodePublishVolume", "NodeUnpublishVolume"):
            events.append((at, 0, node, e))
    for inv, comp in operations(obs["events"]):
        if inv["f"] in RELEASE and comp and comp["type"] == "ok" and "wall" in comp:
            events.append((int(comp["wall"] * 1e9), 1, None, (inv, comp)))
    events.sort(key=lambda x: (x[0], x[1]))
    for at, kind, node, x in events:
        if kind == 0:
            alloc, vid = alloc_of_target(x.get("target_path")), by_ext.get(x.get("volume_id"))
            key = (node, x.get("target_path"))
            pubs = live.setdefault((alloc, vid), {})
            if x["method"] == "NodePublishVolume":
                pubs.setdefault(key, (at, bool(x.get("readonly"))))
            else:
                pubs.pop(key, None)
        else:
            inv, comp = x
            alloc = inv["value"]["alloc"]
            for (a, vid), pubs in live.items():
                if a != alloc or inv["value"].get("volume") not in (None, vid):
                    continue
                # Released without its node, cut off since: stale (but a
                # single-writer volume's writer must have fenced first).
                pubs = {k: p for k, p in pubs.items()
                        if not (stale_at(cuts, k[0], p[0], at) and (p[1] or vid not in sw))}
                if pubs:
                    out.append(Violation(4, "acknowledged release of alloc %s on volume %s "
                                         "answered while its publication was still live"
                                         % (alloc, vid), short((inv, comp)) + "\n" + "\n".join(
                                             "node %s target %s published at_ns=%d" % (n, t, p)
                                             for (n, t), (p, _) in sorted(pubs.items()))))
    return out


# --- check 5: replicas ---------------------------------------------------------

def check_tables(obs):
    out = []
    if obs.get("converge_error"):
        out.append(Violation(5, "the servers did not reach the same applied index after the "
                             "faults stopped", obs["converge_error"]))
    tables = obs.get("tables")
    if not tables:
        return out
    name0, t0 = tables[0]
    for name, t in tables[1:]:
        if t.get("applied") != t0.get("applied"):
            out.append(Violation(5, "servers %s and %s stopped at different applied indexes "
                                 "(%s, %s)" % (name0, name, t0.get("applied"), t.get("applied"))))
            continue
        for table in sorted(set(t0) | set(t)):
            if t0.get(table) != t.get(table):
                a, b = t0.get(table) or [], t.get(table) or []
                diff = [r for r in a if r not in b][:3] + [r for r in b if r not in a][:3]
                out.append(Violation(5, "table %s differs between %s and %s at applied index %s"
                                     % (table, name0, name, t0.get("applied")),
                                     "\n".join(repr(r)[:300] for r in diff)))
    return out


# --- check 6: writes ------------------------------------------------------------

def publications(obs):
    """{VOLUME: [pub]}, pub = {"node", "target", "alloc", "readonly", "start",
    "end"}: each publication the plugins made (successful NodePublishVolume;
    a retry of a live one is the same) from its at_ns to the at_ns of the
    NodeUnpublishVolume that undid it (end None: never undone)."""
    by_ext = {v["external_id"]: vid for vid, v in obs["volumes"].items() if v.get("external_id")}
    out, live = {}, {}
    for at, node, _, e in merged_calls(obs.get("call_logs", {})):
        vid = by_ext.get(e.get("volume_id"))
        if vid is None or e.get("code") != 0:
            continue
        key = (node, e.get("target_path"))
        if e.get("method") == "NodePublishVolume":
            if key not in live:
                live[key] = {"node": node, "target": key[1], "alloc": alloc_of_target(key[1]),
                             "readonly": bool(e.get("readonly")), "start": at, "end": None}
                out.setdefault(vid, []).append(live[key])
        elif e.get("method") == "NodeUnpublishVolume":
            p = live.pop(key, None)
            if p:
                p["end"] = at
    return out


def covers(p, t):
    return p["start"] <= t and (p["end"] is None or t < p["end"])


def describe(p):
    return "node %s alloc %s target %s: published at_ns=%d, %s" % (
        p["node"], p["alloc"], p["target"], p["start"],
        "unpublished at_ns=%d" % p["end"] if p["end"] is not None else "never unpublished")


def cut_outcomes(obs, pubs=None):
    """What became of each partition-client fault's volume: the cut (see
    client_cuts) with "held" (the cut-off node's write publications of the
    volume live at the cut), "moved" (when something was held: the first
    write publication of the volume on another node between the cut and the
    rejoin, else None), "writes" (the lines the allocs of those held
    publications wrote between the cut and the rejoin) and "alloc_lines"
    (the lines of the nemesis' writer before the cut). A client cut off
    only from the servers it connects to may still be reached by the leader
    (its direct connection) and get new claims within its lease: those are
    not "held" and are checked like any other."""
    pubs = publications(obs) if pubs is None else pubs
    writes = obs.get("writes", {})
    csi = obs.get("csi_nodes", {})
    out = []
    for c in client_cuts(obs):
        c = dict(c)
        vid = c["volume"]
        end = c["rejoin"] if c["rejoin"] is not None else float("inf")
        vp = pubs.get(vid, []) if vid else []
        c["held"] = [p for p in vp if p["node"] == c["node"] and not p["readonly"] and
                     covers(p, c["cut"])]
        moved = [p for p in vp if p["node"] != c["node"] and not p["readonly"] and
                 c["cut"] <= p["start"] < end]
        c["moved"] = min(moved, key=lambda p: p["start"]) if moved and c["held"] else None
        holders = {p["alloc"] for p in c["held"]}
        lines = [(a, t) for n, a, t in writes.get(vid, []) if csi.get(n, n) == c["node"]]
        c["writes"] = sorted(t for a, t in lines if a in holders and c["cut"] <= t < end)
        c["alloc_lines"] = sum(1 for a, t in lines if a == c["alloc"] and t < c["cut"])
        out.append(c)
    return out


def check_writes(obs):
    if obs.get("writes") is None:
        return []
    out = []
    pubs = publications(obs)
    csi = obs.get("csi_nodes", {})
    for vid, lines in sorted(obs["writes"].items()):
        single = obs["volumes"].get(vid, {}).get("access_mode") in SINGLE_WRITER
        by_alloc = {}
        for node, alloc, t in lines:
            by_alloc.setdefault((node, alloc), []).append(t)
        vp = pubs.get(vid, [])
        for (node, alloc), ts in sorted(by_alloc.items()):
            ts.sort()
            nid = csi.get(node, node)
            own = [p for p in vp if p["node"] == nid and p["alloc"] == alloc and not p["readonly"]]
            outside = [t for t in ts if not any(covers(p, t) for p in own)]
            if outside:
                t = outside[0]
                undone = [p for p in own if p["end"] is not None and p["end"] <= t]
                what = ("after its publication there was undone: it ran on after "
                        "NodeUnpublishVolume" if undone else
                        "without a write publication of it there")
                out.append(Violation(6, "alloc %s on node %s wrote volume %s %s"
                                     % (alloc, node, vid, what),
                                     "%d line(s) outside, the first at ns=%d\n" % (len(outside), t)
                                     + ("\n".join(describe(p) for p in own) or
                                        "no write publication of it on %s" % nid)))
            if not single:
                continue
            for q in vp:
                if q["readonly"] or any(q is p for p in own):
                    continue
                lo = bisect.bisect_left(ts, q["start"])
                hi = bisect.bisect_left(ts, q["end"]) if q["end"] is not None else len(ts)
                if lo < hi:
                    out.append(Violation(6, "alloc %s on node %s wrote single-writer volume %s "
                                         "while node %s had it published for writing: two "
                                         "writers" % (alloc, node, vid, q["node"]),
                                         "%d line(s) in that publication, the first at ns=%d\n"
                                         "%s" % (hi - lo, ts[lo], describe(q))))
    failed = {}
    for what in ("unwritten", "unread"):
        for vid, node, alloc, t in obs.get(what, []):
            failed.setdefault((vid, node, alloc, what), []).append(t)
    for (vid, node, alloc, what), ts in sorted(failed.items()):
        own = [p for p in pubs.get(vid, []) if p["alloc"] == alloc]
        out.append(Violation(6, "alloc %s on node %s still ran after its volume %s was "
                             "unmounted: it was not stopped before NodeUnpublishVolume"
                             % (alloc, node, vid),
                             "%d %s, the first at ns=%d\n" % (
                                 len(ts), "failed append(s)" if what == "unwritten" else
                                 "look(s) at a volume directory that was gone", min(ts)) +
                             "\n".join(describe(p) for p in own)))
    for node, alloc in obs.get("survivors", []):
        out.append(Violation(6, "alloc %s on node %s still ran after every alloc was stopped or "
                             "had ended: its node never stopped it" % (alloc, node)))
    # Not vacuous: an acknowledged writer of a single-writer volume wrote.
    writers = {}
    for a in allocs_of(obs["events"]).values():
        if any(p[0]["f"] == "alloc-run" and a.outcome(p) == "ok" for p in a.acquires):
            for vol, ro in a.volumes.items():
                if not ro:
                    writers.setdefault(vol, set()).add(a.id)
    for vid, allocs in sorted(writers.items()):
        if obs["volumes"].get(vid, {}).get("access_mode") in SINGLE_WRITER and \
                not obs["writes"].get(vid):
            out.append(Violation(6, "no line in volume %s's log though %d acknowledged allocs "
                                 "write it: check 6 would pass vacuously" % (vid, len(allocs)),
                                 ", ".join(sorted(allocs)[:10])))
    # Partitions of a client: the cut-off writer stopped, and its node
    # unpublished the volume, before another node published it.
    outcomes = cut_outcomes(obs, pubs)
    for c in outcomes:
        label = "partition-client of %s (cut at_ns=%d)" % (c["client"], c["cut"])
        if c["alloc"] and not c["alloc_lines"]:
            out.append(Violation(6, "%s: its alloc %s never wrote volume %s before the cut"
                                 % (label, c["alloc"], c["volume"])))
        m = c["moved"]
        if not m:
            continue
        late = [t for t in c["writes"] if t >= m["start"]]
        if late:
            out.append(Violation(6, "%s: the cut-off client wrote volume %s after node %s "
                                 "published it: its alloc was not stopped first"
                                 % (label, c["volume"], m["node"]),
                                 "%d line(s) from ns=%d; %s" % (len(late), late[0], describe(m))))
        live = [p for p in c["held"] if p["end"] is None or p["end"] > m["start"]]
        if live:
            out.append(Violation(6, "%s: node %s published volume %s before the cut-off node "
                                 "unpublished it" % (label, m["node"], c["volume"]),
                                 "\n".join(describe(p) for p in live + [m])))
    if (outcomes and obs.get("fence_coverage_required", True)
            and not any(c["moved"] for c in outcomes)):
        out.append(Violation(6, "no partition-client fault moved a volume that the cut-off client "
                             "had published for writing to another node (%d faults, %d cut off "
                             "a writer): its fence is not exercised"
                             % (len(outcomes), sum(1 for c in outcomes if c["held"]))))
    return out


def partition_summary(obs):
    """One line on the partition-client faults of a run, for its summary."""
    cs = cut_outcomes(obs)
    if not cs:
        return "partition-client: none"
    moved = [c for c in cs if c["moved"]]
    def count(key):
        return ", ".join("%s %d" % (n, sum(c[key] == n for c in cs))
                         for n in sorted({c[key] for c in cs}))
    s = "partition-client: %d fault(s) (%s; %s); %d cut off a writing alloc; %d moved its " \
        "volume to the other node" % (len(cs), count("client"), count("mode"),
                                      sum(1 for c in cs if c["held"]), len(moved))
    if moved:
        d = [(c["moved"]["start"] - c["cut"]) / 1e9 for c in moved]
        s += " (%.1f-%.1f s after the cut)" % (min(d), max(d))
        last = [(c["writes"][-1] - c["cut"]) / 1e9 for c in moved if c["writes"]]
        if last:
            s += "; the cut-off writes ended %.1f-%.1f s after the cut" % (min(last), max(last))
    return s


CHECKS = (check_acks, check_single_writer_committed, check_single_writer_plugin,
          check_releases_freed, check_csi_order, check_release_unpublished, check_tables,
          check_writes)


def check(obs):
    out = []
    for c in CHECKS:
        out.extend(c(obs))
    return out


def summarize(violations):
    """Violations with the same description folded into the first one."""
    first, count = {}, {}
    for v in violations:
        key = (v.check, v.what)
        if key not in first:
            first[key] = v
        count[key] = count.get(key, 0) + 1
    out = []
    for key, v in first.items():
        if count[key] > 1:
            v = Violation(v.check, "%s (%d times; the first shown)" % (v.what, count[key]),
                          v.detail)
        out.append(v)
    return out
