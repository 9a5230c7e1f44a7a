"""The fault suite's workload: worker threads issuing operations through the
real `berth` shell against random live servers, recording each in the
history. Operation kinds are pluggable: a small class per kind with
`generate` (pick the arguments from the worker's model, or None when the
kind does not apply now), `argv` (the shell command), `classify` (the
outcome of an exit code and the shell's output) and `update` (the worker's
model after it).

The suite runs allocs: `berth alloc run --node N --id A --volume
vI=VOL[:ro]... -- sh -c WRITER` (AllocRunOp, one or two volumes; the command
appends a line to each volume it writes until it is stopped, see
writer_command) and `berth alloc stop A` (AllocStopOp). `volume claim` and
`volume release` (ClaimOp, ReleaseOp) fit the same shape and the checker
takes both (checker.ACQUIRE/RELEASE). Operator (below) runs and stops allocs
for the nemesis (partition-client), recorded in the same history."""

import subprocess
import threading
import time

from harness import BERTH

# Exit codes of the shell: 0 ok, 1 internal, 2 invalid, 3 not found,
# 4 refused by the rules, 5 unreachable/unavailable.
DEFINITE_FAIL = {2, 3, 4}


class Volume:
    def __init__(self, vid, access_mode):
        self.id = vid
        self.access_mode = access_mode
        self.external_id = None

    @property
    def reader_only(self):
        return "reader-only" in self.access_mode

    def spec(self):
        return {"id": self.id, "plugin_id": "hostpath", "capabilities": [
            {"access_mode": self.access_mode, "attachment_mode": "file-system"}]}


class WorkerModel:
    """What one worker believes: its allocs and what became of them."""

    def __init__(self, worker, prefix=None):
        self.worker = worker
        self.prefix = prefix or "w%d" % worker
        self.counter = 0
        # alloc -> {"volumes": [VOLUME...], "node", "claim": outcome, "release": outcome|None}
        self.allocs = {}

    def new_alloc(self):
        self.counter += 1
        return "%s-%d" % (self.prefix, self.counter)

    def releasable(self):
        """Allocs that may hold a volume and whose release is not known done."""
        return [a for a, s in self.allocs.items()
                if s["claim"] in ("ok", "info") and s["release"] in (None, "info")]


def unwound(err):
    # A claim whose CSI step failed after it was committed is unwound; the
    # error's code is the step's, so the outcome is not a clean refusal.
    return "released again" in err or "unwinding it also failed" in err


class ClaimOp:
    """berth volume claim VOL --alloc A --node N [--read-only]"""
    f = "claim"
    weight = 5

    def __init__(self, volumes, nodes):
        self.volumes = volumes
        self.nodes = nodes

    def generate(self, rng, model):
        if len(model.releasable()) >= 3:
            return None
        vol = rng.choice(self.volumes)
        if vol.reader_only:
            ro = True
        elif vol.access_mode.startswith("single-node"):
            ro = rng.random() < 0.15
        else:
            ro = rng.random() < 0.4
        return {"alloc": model.new_alloc(), "node": rng.choice(self.nodes),
                "volumes": [{"volume": vol.id, "read_only": ro}]}

    def argv(self, value):
        v = value["volumes"][0]
        return (["volume", "claim", v["volume"], "--alloc", value["alloc"], "--node",
                 value["node"]] + (["--read-only"] if v["read_only"] else []))

    def classify(self, code, err, out=""):
        if code == 0:
            return "ok"
        if code in DEFINITE_FAIL and not unwound(err):
            return "fail"
        return "info"

    def update(self, model, value, outcome):
        v = value["volumes"][0]
        model.allocs[value["alloc"]] = {"volumes": [v["volume"]], "node": value["node"],
                                        "claim": outcome, "release": None}


class ReleaseOp:
    """berth volume release VOL --alloc A"""
    f = "release"
    weight = 4

    def generate(self, rng, model):
        allocs = model.releasable()
        if not allocs:
            return None
        a = rng.choice(sorted(allocs))
        return {"alloc": a, "volume": model.allocs[a]["volumes"][0]}

    def argv(self, value):
        return ["volume", "release", value["volume"], "--alloc", value["alloc"]]

    def classify(self, code, err, out=""):
        if code == 0:
            return "ok"
        if code in DEFINITE_FAIL:
            return "fail"
        return "info"

    def update(self, model, value, outcome):
        s = model.allocs[value["alloc"]]
        # Not found: the claim never took effect, or an earlier release won.
        s["release"] = "ok" if outcome in ("ok", "fail") else "info"


def writer_command(node, alloc, volumes):
    """The command of an alloc: every 0.1 s, one line `NODE ALLOC NS` (NS:
    the epoch time in nanoseconds, taken before the writes) appended to
    `log` in each volume it claimed for writing ($BERTH_VOLUME_V<i>, the
    volume's directory in the plugins' shared root); a volume claimed
    read-only is only looked at. A write that fails, or a volume directory
    that is gone (the volume is no longer mounted at that path: the alloc
    still runs after its NodeUnpublishVolume), goes to the alloc's stderr
    as `unwritten VOLUME NODE ALLOC NS` or `unread ...`, which the runner
    collects. Both are read by the checker's check 6."""
    steps = []
    for i, v in enumerate(volumes):
        if v["read_only"]:
            steps.append('[ -d "$BERTH_VOLUME_V%d" ] || echo "unread %s %s %s $t" >&2; '
                         % (i, v["volume"], node, alloc))
            continue
        steps.append('{ echo "%s %s $t" >> "$BERTH_VOLUME_V%d/log"; } 2>/dev/null || '
                     'echo "unwritten %s %s %s $t" >&2; ' % (node, alloc, i, v["volume"], node,
                                                           alloc))
    return "while true; do t=$(date +%%s%%N); %ssleep 0.1; done" % "".join(steps)


def pick_mode(rng, vol):
    """Read-only or not, for one volume of a claim or an alloc."""
    if vol.reader_only:
        return True
    if vol.access_mode.startswith("single-node"):
        return rng.random() < 0.15
    return rng.random() < 0.4


class AllocRunOp:
    """berth alloc run --node N --id A --volume v0=VOL[:ro] [--volume v1=VOL2[:ro]]
    -- sh -c WRITER

    The command (writer_command) writes each volume claimed for writing
    until the alloc is stopped. While `focus` is set (the nemesis'
    partition-client: {"volume", "node"}), half of the runs ask for that
    volume, for writing, on that node: other workers claim the volume of a
    cut-off client elsewhere. Exit 0: every volume is
    claimed and published (ok). A refusal (exit 2-4) fails the alloc and
    the leader answers once the claims it took are released: a definite
    failure, unless the answer says releases are still in progress or the
    alloc existed already (the shell resent a request whose first attempt
    may have run it)."""
    f = "alloc-run"
    weight = 5

    def __init__(self, volumes, nodes, two_volumes=0.2):
        self.volumes = volumes
        self.nodes = nodes
        self.two_volumes = two_volumes
        self.focus = None

    def generate(self, rng, model):
        if len(model.releasable()) >= 3:
            return None
        focus = self.focus
        if focus and rng.random() < 0.5:
            return {"alloc": model.new_alloc(), "node": focus["node"],
                    "volumes": [{"volume": focus["volume"], "read_only": False}]}
        n = 2 if rng.random() < self.two_volumes else 1
        vols = rng.sample(self.volumes, n)
        return {"alloc": model.new_alloc(), "node": rng.choice(self.nodes),
                "volumes": [{"volume": v.id, "read_only": pick_mode(rng, v)} for v in vols]}

    def argv(self, value):
        args = ["alloc", "run", "--node", value["node"], "--id", value["alloc"]]
        for i, v in enumerate(value["volumes"]):
            args += ["--volume", "v%d=%s%s" % (i, v["volume"], ":ro" if v["read_only"] else "")]
        return args + ["--", "sh", "-c", writer_command(value["node"], value["alloc"],
                                                        value["volumes"])]

    def classify(self, code, err, out=""):
        if code == 0:
            return "ok"
        if code in DEFINITE_FAIL and "every claim it took was released" in err:
            return "fail"
        if code in DEFINITE_FAIL and "exists already" not in err and "failed:" not in err:
            return "fail"  # refused before anything was committed (no such node, ...)
        return "info"

    def update(self, model, value, outcome):
        model.allocs[value["alloc"]] = {"volumes": [v["volume"] for v in value["volumes"]],
                                        "node": value["node"], "claim": outcome,
                                        "release": None}


class AllocStopOp:
    """berth alloc stop A

    Exit 0 with "; its claims are released" (also said of an alloc that
    holds nothing): ok. Exit 0 while releases are still in progress: the release
    is invoked but not confirmed (info). Exit 3: the alloc does not exist
    (its run never took effect): a definite failure that holds nothing."""
    f = "alloc-stop"
    weight = 4

    def generate(self, rng, model):
        allocs = model.releasable()
        if not allocs:
            return None
        return {"alloc": rng.choice(sorted(allocs))}

    def argv(self, value):
        return ["alloc", "stop", value["alloc"]]

    def classify(self, code, err, out=""):
        if code == 0:
            # Not "..., so its claims are released once it reconnects" (the
            # client was not connected): that release is still to come.
            return "ok" if "; its claims are released" in out else "info"
        if code == 3:
            return "fail"
        return "info"

    def update(self, model, value, outcome):
        s = model.allocs[value["alloc"]]
        s["release"] = "ok" if outcome in ("ok", "fail") else "info"


def run_shell(address, args, timeout):
    """(exit code, stderr) of one shell command; None as code on timeout."""
    try:
        p = subprocess.run([BERTH, "--address", address, "--timeout", str(timeout)] + args,
                           capture_output=True, text=True, timeout=timeout + 10)
        return p.returncode, p.stderr, p.stdout
    except subprocess.TimeoutExpired:
        return None, "timed out after %ss" % (timeout + 10), ""


class Operator:
    """Alloc runs and stops made outside the workers (the nemesis'
    partition-client: the cut-off client's writer, the claims of its volume
    elsewhere), recorded in the history as process `process` and kept in a
    model of their own, so that the releases after the heal include them."""

    def __init__(self, workload, run_kind, stop_kind, rng, process="nemesis"):
        self.workload = workload
        self.run_kind = run_kind
        self.stop_kind = stop_kind
        self.rng = rng
        self.process = process
        self.model = WorkerModel(-1, prefix="nem")

    def run(self, node, volume):
        """Runs a writer of `volume` on `node`: (alloc, outcome)."""
        value = {"alloc": self.model.new_alloc(), "node": node,
                 "volumes": [{"volume": volume, "read_only": False}]}
        outcome = self.workload.execute(self.process, self.run_kind, value,
                                        self.rng.choice(self.workload.addresses()))
        self.run_kind.update(self.model, value, outcome)
        return value["alloc"], outcome

    def stop(self, alloc, bound=20, stop_event=None):
        """Stops `alloc` until the stop is definite or `bound` s passed."""
        deadline = time.time() + bound
        while time.time() < deadline:
            value = {"alloc": alloc}
            outcome = self.workload.execute(self.process, self.stop_kind, value,
                                            self.rng.choice(self.workload.addresses()))
            self.stop_kind.update(self.model, value, outcome)
            if outcome in ("ok", "fail"):
                return outcome
            time.sleep(0.5)
        return "info"


class Workload:
    def __init__(self, history, rng, kinds, addresses, workers=4, op_timeout=8):
        """addresses(): the addresses of the servers believed alive now."""
        self.history = history
        self.kinds = kinds
        self.addresses = addresses
        self.op_timeout = op_timeout
        self.stop_event = threading.Event()
        self.models = [WorkerModel(w) for w in range(workers)]
        self.rngs = [rng.__class__(rng.random()) for _ in range(workers)]
        self.threads = []
        self.count = 0
        self.lock = threading.Lock()

    def pick(self, rng, model):
        choices = []
        for k in self.kinds:
            value = k.generate(rng, model)
            if value is not None:
                choices.append((k, value))
        total = sum(k.weight for k, _ in choices)
        x = rng.random() * total
        for k, value in choices:
            x -= k.weight
            if x <= 0:
                return k, value
        return choices[-1] if choices else (None, None)

    def execute(self, process, kind, value, address, with_exit=False):
        """Runs one operation; its outcome (or its exit code, with_exit)."""
        op = self.history.invoke(process, kind.f, value)
        code, err, out = run_shell(address, kind.argv(value), self.op_timeout)
        outcome = kind.classify(code, err, out) if code is not None else "info"
        self.history.complete(op, process, kind.f, value, outcome, code, err)
        with self.lock:
            self.count += 1
        return code if with_exit else outcome

    def worker(self, w):
        rng, model = self.rngs[w], self.models[w]
        while not self.stop_event.is_set():
            kind, value = self.pick(rng, model)
            if kind is None:
                self.stop_event.wait(0.05)
                continue
            addrs = self.addresses()
            outcome = self.execute(w, kind, value, rng.choice(addrs))
            kind.update(model, value, outcome)
            self.stop_event.wait(rng.random() * 0.1)

    def start(self):
        for w in range(len(self.models)):
            t = threading.Thread(target=self.worker, args=(w,), daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join()
