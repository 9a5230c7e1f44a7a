#!/usr/bin/python3
"""A small CSI plugin that berth did not write, for berth's tests.

Written from the CSI specification's service and message names (package
csi.v1), independent of berth's C++ code: it generates its Python stubs at
start from csi/csi.proto (wire-compatible with the spec) with grpc_tools,
and serves Identity, Controller and Node on a unix socket, as a monolith.

Its volumes are directories ROOT/volumes/ID; a snapshot is a copy of one
(ROOT/snapshots/ID).  NodeStageVolume makes the staging directory,
NodePublishVolume bind-mounts the volume's directory on the target (or,
without the right to mount, only makes the directory).  Its state (volumes,
snapshots, controller publications, stagings, publications) is kept in
ROOT/state.json, written after every change, so a restart keeps it.

Every call is logged as one JSON line in --call-log: the method, the request
(secrets replaced by the SHA-256 of each value, so a test can check that a
secret arrived without the log holding it), the gRPC code and message, the
response.  A volume whose directory vanished is reported abnormal
(VOLUME_CONDITION) by ListVolumes, ControllerGetVolume and NodeGetVolumeStats.

Usage: plugin.py --endpoint unix:///path/csi.sock --root DIR --node-id ID
                 --call-log FILE [--name NAME]
"""

import argparse
import concurrent.futures
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import grpc
from google.protobuf import json_format
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "csi"))


def load_csi():
    """csi_pb2 generated from the repository's csi/csi.proto into a temp dir."""
    out = tempfile.mkdtemp(prefix="foreign-csi-")
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["protoc", "-I" + PROTO_DIR, "-I" + include, "-I/usr/include",
                      "--python_out=" + out, "--grpc_python_out=" + out, "csi.proto"])
    if rc != 0:
        sys.exit("plugin.py: protoc failed on %s/csi.proto" % PROTO_DIR)
    sys.path.insert(0, out)
    pb = importlib.import_module("csi_pb2")
    shutil.rmtree(out, ignore_errors=True)
    return pb


csi = load_csi()
GiB = 1 << 30


class Fail(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def secrets_hashed(d):
    """The dict with every `secrets` map's values replaced by their SHA-256."""
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            if k == "secrets" and isinstance(v, dict):
                out[k] = {sk: "sha256:" + hashlib.sha256(sv.encode()).hexdigest()
                          for sk, sv in v.items()}
            else:
                out[k] = secrets_hashed(v)
        return out
    if isinstance(d, list):
        return [secrets_hashed(x) for x in d]
    return d


def dir_bytes(path):
    total = 0
    for base, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(base, f)).st_size
            except OSError:
                pass
    return total


def is_mount(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


class Plugin:
    def __init__(self, root, node_id, name):
        self.root = root
        self.node_id = node_id
        self.name = name
        self.lock = threading.Lock()
        os.makedirs(os.path.join(root, "volumes"), exist_ok=True)
        os.makedirs(os.path.join(root, "snapshots"), exist_ok=True)
        self.state_path = os.path.join(root, "state.json")
        self.state = {"volumes": {}, "snapshots": {}, "attached": {}, "staged": {},
                      "published": {}}
        if os.path.exists(self.state_path):
            with open(self.state_path) as f:
                self.state.update(json.load(f))

    def save(self):
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, self.state_path)

    def vol_dir(self, vid):
        return os.path.join(self.root, "volumes", vid)

    def snap_dir(self, sid):
        return os.path.join(self.root, "snapshots", sid)

    def volume(self, vid):
        if not vid:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is required")
        v = self.state["volumes"].get(vid)
        if v is None:
            raise Fail(grpc.StatusCode.NOT_FOUND, "volume %s does not exist" % vid)
        return v

    def condition(self, vid):
        if os.path.isdir(self.vol_dir(vid)):
            return csi.VolumeCondition(abnormal=False, message="ok")
        return csi.VolumeCondition(abnormal=True,
                                   message="the directory of volume %s is gone" % vid)

    def csi_volume(self, vid):
        v = self.state["volumes"][vid]
        out = csi.Volume(volume_id=vid, capacity_bytes=v["capacity"],
                         volume_context={"foreign/name": v["name"]})
        if v.get("source_snapshot"):
            out.content_source.snapshot.snapshot_id = v["source_snapshot"]
        if v.get("source_volume"):
            out.content_source.volume.volume_id = v["source_volume"]
        return out

    def csi_snapshot(self, sid):
        s = self.state["snapshots"][sid]
        out = csi.Snapshot(snapshot_id=sid, source_volume_id=s["source"],
                           size_bytes=s["size"], ready_to_use=True)
        out.creation_time.FromNanoseconds(s["created_ns"])
        return out

    # --- Identity ---------------------------------------------------------------

    def GetPluginInfo(self, req):
        return csi.GetPluginInfoResponse(name=self.name, vendor_version="0.1.0")

    def GetPluginCapabilities(self, req):
        S = csi.PluginCapability.Service
        caps = [csi.PluginCapability(service=S(type=S.CONTROLLER_SERVICE)),
                csi.PluginCapability(volume_expansion=csi.PluginCapability.VolumeExpansion(
                    type=csi.PluginCapability.VolumeExpansion.ONLINE))]
        return csi.GetPluginCapabilitiesResponse(capabilities=caps)

    def Probe(self, req):
        r = csi.ProbeResponse()
        r.ready.value = True
        return r

    # --- Controller -------------------------------------------------------------

    def ControllerGetCapabilities(self, req):
        R = csi.ControllerServiceCapability.RPC
        kinds = [R.CREATE_DELETE_VOLUME, R.PUBLISH_UNPUBLISH_VOLUME, R.LIST_VOLUMES,
                 R.CREATE_DELETE_SNAPSHOT, R.LIST_SNAPSHOTS, R.CLONE_VOLUME, R.EXPAND_VOLUME,
                 R.LIST_VOLUMES_PUBLISHED_NODES, R.VOLUME_CONDITION, R.GET_VOLUME]
        return csi.ControllerGetCapabilitiesResponse(
            capabilities=[csi.ControllerServiceCapability(rpc=R(type=k)) for k in kinds])

    def CreateVolume(self, req):
        if not req.name:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "name is required")
        if not req.volume_capabilities:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_capabilities are required")
        required = req.capacity_range.required_bytes
        limit = req.capacity_range.limit_bytes
        if limit and limit < required:
            raise Fail(grpc.StatusCode.OUT_OF_RANGE, "limit_bytes < required_bytes")
        src_snap = src_vol = ""
        if req.HasField("volume_content_source"):
            which = req.volume_content_source.WhichOneof("type")
            if which == "snapshot":
                src_snap = req.volume_content_source.snapshot.snapshot_id
            elif which == "volume":
                src_vol = req.volume_content_source.volume.volume_id
        vid = "fv-" + hashlib.sha256(req.name.encode()).hexdigest()[:12]
        params = dict(req.parameters)
        if vid in self.state["volumes"]:
            v = self.state["volumes"][vid]
            if (v["params"] != params or v.get("source_snapshot", "") != src_snap
                    or v.get("source_volume", "") != src_vol
                    or (required and v["capacity"] < required)
                    or (limit and v["capacity"] > limit)):
                raise Fail(grpc.StatusCode.ALREADY_EXISTS,
                           "volume %s exists with other arguments" % req.name)
            return csi.CreateVolumeResponse(volume=self.csi_volume(vid))
        capacity = required or limit or GiB
        source_dir = None
        if src_snap:
            s = self.state["snapshots"].get(src_snap)
            if s is None:
                raise Fail(grpc.StatusCode.NOT_FOUND, "snapshot %s does not exist" % src_snap)
            source_dir, capacity = self.snap_dir(src_snap), max(capacity, s["size"])
        elif src_vol:
            s = self.state["volumes"].get(src_vol)
            if s is None:
                raise Fail(grpc.StatusCode.NOT_FOUND, "volume %s does not exist" % src_vol)
            source_dir, capacity = self.vol_dir(src_vol), max(capacity, s["capacity"])
        if limit and capacity > limit:
            raise Fail(grpc.StatusCode.OUT_OF_RANGE, "the source is larger than limit_bytes")
        if source_dir:
            shutil.copytree(source_dir, self.vol_dir(vid), dirs_exist_ok=True)
        else:
            os.makedirs(self.vol_dir(vid), exist_ok=True)
        self.state["volumes"][vid] = {"name": req.name, "capacity": capacity, "params": params,
                                      "source_snapshot": src_snap, "source_volume": src_vol}
        self.save()
        return csi.CreateVolumeResponse(volume=self.csi_volume(vid))

    def DeleteVolume(self, req):
        if not req.volume_id:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is required")
        if req.volume_id not in self.state["volumes"]:
            return csi.DeleteVolumeResponse()
        if self.state["attached"].get(req.volume_id):
            raise Fail(grpc.StatusCode.FAILED_PRECONDITION,
                       "volume %s is published to %s" %
                       (req.volume_id, ", ".join(self.state["attached"][req.volume_id])))
        shutil.rmtree(self.vol_dir(req.volume_id), ignore_errors=True)
        del self.state["volumes"][req.volume_id]
        self.state["attached"].pop(req.volume_id, None)
        self.save()
        return csi.DeleteVolumeResponse()

    def ControllerPublishVolume(self, req):
        self.volume(req.volume_id)
        if req.node_id != self.node_id:
            raise Fail(grpc.StatusCode.NOT_FOUND, "node %s is not this plugin's" % req.node_id)
        if not req.HasField("volume_capability"):
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_capability is required")
        nodes = self.state["attached"].setdefault(req.volume_id, [])
        if req.node_id not in nodes:
            nodes.append(req.node_id)
            self.save()
        return csi.ControllerPublishVolumeResponse(
            publish_context={"foreign/device": "/dev/foreign/" + req.volume_id})

    def ControllerUnpublishVolume(self, req):
        if not req.volume_id:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is required")
        nodes = self.state["attached"].get(req.volume_id, [])
        gone = [n for n in nodes if not req.node_id or n == req.node_id]
        if gone:
            self.state["attached"][req.volume_id] = [n for n in nodes if n not in gone]
            self.save()
        return csi.ControllerUnpublishVolumeResponse()

    def ValidateVolumeCapabilities(self, req):
        self.volume(req.volume_id)
        r = csi.ValidateVolumeCapabilitiesResponse()
        r.confirmed.volume_capabilities.extend(req.volume_capabilities)
        return r

    def ListVolumes(self, req):
        ids = sorted(self.state["volumes"])
        start = 0
        if req.starting_token:
            if not req.starting_token.isdigit() or int(req.starting_token) > len(ids):
                raise Fail(grpc.StatusCode.ABORTED, "starting_token %s is not valid" %
                           req.starting_token)
            start = int(req.starting_token)
        end = len(ids) if req.max_entries == 0 else min(len(ids), start + req.max_entries)
        r = csi.ListVolumesResponse(next_token=str(end) if end < len(ids) else "")
        for vid in ids[start:end]:
            e = r.entries.add()
            e.volume.CopyFrom(self.csi_volume(vid))
            e.status.published_node_ids.extend(self.state["attached"].get(vid, []))
            e.status.volume_condition.CopyFrom(self.condition(vid))
        return r

    def ControllerGetVolume(self, req):
        self.volume(req.volume_id)
        r = csi.ControllerGetVolumeResponse()
        r.volume.CopyFrom(self.csi_volume(req.volume_id))
        r.status.published_node_ids.extend(self.state["attached"].get(req.volume_id, []))
        r.status.volume_condition.CopyFrom(self.condition(req.volume_id))
        return r

    def CreateSnapshot(self, req):
        if not req.name or not req.source_volume_id:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "name and source_volume_id are required")
        sid = "fsnap-" + hashlib.sha256(req.name.encode()).hexdigest()[:12]
        if sid in self.state["snapshots"]:
            if self.state["snapshots"][sid]["source"] != req.source_volume_id:
                raise Fail(grpc.StatusCode.ALREADY_EXISTS,
                           "snapshot %s exists of another volume" % req.name)
            return csi.CreateSnapshotResponse(snapshot=self.csi_snapshot(sid))
        v = self.volume(req.source_volume_id)
        shutil.copytree(self.vol_dir(req.source_volume_id), self.snap_dir(sid),
                        dirs_exist_ok=True)
        self.state["snapshots"][sid] = {"name": req.name, "source": req.source_volume_id,
                                        "size": v["capacity"], "created_ns": time.time_ns()}
        self.save()
        return csi.CreateSnapshotResponse(snapshot=self.csi_snapshot(sid))

    def DeleteSnapshot(self, req):
        if not req.snapshot_id:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "snapshot_id is required")
        if self.state["snapshots"].pop(req.snapshot_id, None) is not None:
            shutil.rmtree(self.snap_dir(req.snapshot_id), ignore_errors=True)
            self.save()
        return csi.DeleteSnapshotResponse()

    def ListSnapshots(self, req):
        ids = sorted(sid for sid, s in self.state["snapshots"].items()
                     if (not req.snapshot_id or sid == req.snapshot_id)
                     and (not req.source_volume_id or s["source"] == req.source_volume_id))
        start = 0
        if req.starting_token:
            if not req.starting_token.isdigit() or int(req.starting_token) > len(ids):
                raise Fail(grpc.StatusCode.ABORTED, "starting_token %s is not valid" %
                           req.starting_token)
            start = int(req.starting_token)
        end = len(ids) if req.max_entries == 0 else min(len(ids), start + req.max_entries)
        r = csi.ListSnapshotsResponse(next_token=str(end) if end < len(ids) else "")
        for sid in ids[start:end]:
            r.entries.add().snapshot.CopyFrom(self.csi_snapshot(sid))
        return r

    def ControllerExpandVolume(self, req):
        v = self.volume(req.volume_id)
        required = req.capacity_range.required_bytes
        limit = req.capacity_range.limit_bytes
        if limit and limit < required:
            raise Fail(grpc.StatusCode.OUT_OF_RANGE, "limit_bytes < required_bytes")
        if required > v["capacity"]:
            v["capacity"] = required
            self.save()
        return csi.ControllerExpandVolumeResponse(capacity_bytes=v["capacity"],
                                                  node_expansion_required=True)

    # --- Node -------------------------------------------------------------------

    def NodeGetCapabilities(self, req):
        R = csi.NodeServiceCapability.RPC
        kinds = [R.STAGE_UNSTAGE_VOLUME, R.GET_VOLUME_STATS, R.EXPAND_VOLUME, R.VOLUME_CONDITION]
        return csi.NodeGetCapabilitiesResponse(
            capabilities=[csi.NodeServiceCapability(rpc=R(type=k)) for k in kinds])

    def NodeGetInfo(self, req):
        return csi.NodeGetInfoResponse(node_id=self.node_id)

    def NodeStageVolume(self, req):
        self.volume(req.volume_id)
        if not req.staging_target_path or not req.HasField("volume_capability"):
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT,
                       "staging_target_path and volume_capability are required")
        if self.node_id not in self.state["attached"].get(req.volume_id, []):
            raise Fail(grpc.StatusCode.FAILED_PRECONDITION,
                       "volume %s is not published to node %s (ControllerPublishVolume first)"
                       % (req.volume_id, self.node_id))
        staged = self.state["staged"].get(req.volume_id)
        if staged and staged != req.staging_target_path:
            raise Fail(grpc.StatusCode.ALREADY_EXISTS,
                       "volume %s is staged at %s" % (req.volume_id, staged))
        os.makedirs(req.staging_target_path, exist_ok=True)
        self.state["staged"][req.volume_id] = req.staging_target_path
        self.save()
        return csi.NodeStageVolumeResponse()

    def NodeUnstageVolume(self, req):
        if not req.volume_id or not req.staging_target_path:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT,
                       "volume_id and staging_target_path are required")
        if self.state["staged"].get(req.volume_id) == req.staging_target_path:
            del self.state["staged"][req.volume_id]
            self.save()
        return csi.NodeUnstageVolumeResponse()

    def NodePublishVolume(self, req):
        self.volume(req.volume_id)
        if not req.target_path or not req.HasField("volume_capability"):
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT,
                       "target_path and volume_capability are required")
        if self.state["staged"].get(req.volume_id) != req.staging_target_path:
            raise Fail(grpc.StatusCode.FAILED_PRECONDITION,
                       "volume %s is not staged at %s (NodeStageVolume first)"
                       % (req.volume_id, req.staging_target_path))
        os.makedirs(req.target_path, exist_ok=True)
        if not is_mount(req.target_path):
            flags = ["-o", "bind,ro"] if req.readonly else ["--bind"]
            subprocess.run(["mount"] + flags + [self.vol_dir(req.volume_id), req.target_path],
                           capture_output=True)  # without the right to mount: a directory
        pubs = self.state["published"].setdefault(req.volume_id, [])
        if req.target_path not in pubs:
            pubs.append(req.target_path)
            self.save()
        return csi.NodePublishVolumeResponse()

    def NodeUnpublishVolume(self, req):
        if not req.volume_id or not req.target_path:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_id and target_path are required")
        if is_mount(req.target_path):
            r = subprocess.run(["umount", req.target_path], capture_output=True, text=True)
            if r.returncode != 0:
                raise Fail(grpc.StatusCode.INTERNAL, "umount %s: %s" % (req.target_path,
                                                                       r.stderr.strip()))
        if os.path.isdir(req.target_path):  # not a mount (any more): its own files only
            shutil.rmtree(req.target_path)
        pubs = self.state["published"].get(req.volume_id, [])
        if req.target_path in pubs:
            pubs.remove(req.target_path)
            self.save()
        return csi.NodeUnpublishVolumeResponse()

    def NodeGetVolumeStats(self, req):
        v = self.volume(req.volume_id)
        if not req.volume_path:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_path is required")
        if (req.volume_path not in self.state["published"].get(req.volume_id, [])
                and req.volume_path != self.state["staged"].get(req.volume_id)):
            raise Fail(grpc.StatusCode.NOT_FOUND, "volume %s is not published at %s"
                       % (req.volume_id, req.volume_path))
        used = dir_bytes(self.vol_dir(req.volume_id))
        r = csi.NodeGetVolumeStatsResponse()
        r.usage.add(unit=csi.VolumeUsage.BYTES, total=v["capacity"], used=used,
                    available=max(0, v["capacity"] - used))
        r.usage.add(unit=csi.VolumeUsage.INODES, total=1000000, used=0, available=1000000)
        r.volume_condition.CopyFrom(self.condition(req.volume_id))
        return r

    def NodeExpandVolume(self, req):
        v = self.volume(req.volume_id)
        if not req.volume_path:
            raise Fail(grpc.StatusCode.INVALID_ARGUMENT, "volume_path is required")
        if (req.volume_path not in self.state["published"].get(req.volume_id, [])
                and req.volume_path != self.state["staged"].get(req.volume_id)):
            raise Fail(grpc.StatusCode.NOT_FOUND, "volume %s is not published at %s"
                       % (req.volume_id, req.volume_path))
        return csi.NodeExpandVolumeResponse(
            capacity_bytes=max(v["capacity"], req.capacity_range.required_bytes))


class CallLog:
    def __init__(self, path):
        self.f = open(path, "a")
        self.lock = threading.Lock()

    def write(self, method, request, code, message, response):
        line = {"method": method, "at_ns": time.time_ns(),
                "request": secrets_hashed(json_format.MessageToDict(
                    request, preserving_proto_field_name=True)),
                "code": code.name, "message": message}
        if response is not None:
            line["response"] = json_format.MessageToDict(response,
                                                         preserving_proto_field_name=True)
        with self.lock:
            self.f.write(json.dumps(line, sort_keys=True) + "\n")
            self.f.flush()


def handlers(plugin, log):
    """A generic handler per service of csi.proto: every method is served and
    logged; the ones the plugin does not implement answer UNIMPLEMENTED."""
    out = []
    for service in csi.DESCRIPTOR.services_by_name.values():
        methods = {}
        for m in service.methods:
            req_cls = getattr(csi, m.input_type.name)
            resp_cls = getattr(csi, m.output_type.name)

            def serve(request, context, name=m.name):
                impl = getattr(plugin, name, None)
                # One call at a time, logged before the next starts: the
                # log's order is the order the calls ran in.
                with plugin.lock:
                    response = None
                    try:
                        if impl is None:
                            raise Fail(grpc.StatusCode.UNIMPLEMENTED, name + " is not implemented")
                        response = impl(request)
                        code, message = grpc.StatusCode.OK, ""
                    except Fail as f:
                        code, message = f.code, f.message
                    except Exception as e:  # a bug of the plugin: said as INTERNAL
                        code, message = grpc.StatusCode.INTERNAL, repr(e)
                    log.write(name, request, code, message, response)
                if code != grpc.StatusCode.OK:
                    context.abort(code, message)
                return response

            methods[m.name] = grpc.unary_unary_rpc_method_handler(
                serve, request_deserializer=req_cls.FromString,
                response_serializer=resp_cls.SerializeToString)
        out.append(grpc.method_handlers_generic_handler(service.full_name, methods))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", required=True, help="unix:///path/to/csi.sock")
    ap.add_argument("--root", required=True)
    ap.add_argument("--node-id", required=True)
    ap.add_argument("--call-log", required=True)
    ap.add_argument("--name", default="foreign.csi.berth.test")
    a = ap.parse_args()
    path = a.endpoint[len("unix://"):] if a.endpoint.startswith("unix://") else a.endpoint
    if os.path.exists(path):
        os.unlink(path)
    plugin = Plugin(a.root, a.node_id, a.name)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8),
                         handlers=handlers(plugin, CallLog(a.call_log)))
    server.add_insecure_port("unix:" + path)
    server.start()
    print("foreign plugin serving on unix://%s" % path, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
