"""Nomad's own API client against berth (issue 60): each of Nomad's CSI paths
driven with the exact requests the `api` package of Nomad v1.5.5 sends
(api/api.go: newRequest, setQueryOptions, setWriteOptions, toHTTP;
api/csi.go: every CSIVolumes and CSIPlugins call), and every header and
field that client reads checked as it reads them: parseQueryMeta and
parseWriteMeta's headers parsed as strictly as Go's strconv does, bodies
decoded against the client's structs as Go's encoding/json would (a field
of the wrong type fails the whole call).  docs/http-api.md writes the same
requests down beside each path.

What Go's client puts on the wire, whatever the call:
- the query: url.Values.Encode (keys sorted), WriteOptions as region,
  namespace, idempotency_token; QueryOptions as region, namespace, stale
  (empty value), index, wait ("%dms"), prefix, filter, per_page,
  next_token, reverse;
- headers: User-Agent Go-http-client/1.1, Accept-Encoding gzip,
  X-Nomad-Token when a token is set, X-Nomad-CSI-Secrets for the calls that
  carry CSI secrets; no Content-Type, also with a body;
- a body: json.Encoder's (compact, then a newline), every field of the
  request struct in its order, zero values included, the embedded
  WriteRequest flattened beside the request's own fields."""

import http.client
import json
import os
import re
import shutil
import tempfile
import unittest
import urllib.parse

from harness import Agent, berth
from test_http_api import SECRET, spec, start_dev, stop_dev, wait

GO_ZERO_TIME = "0001-01-01T00:00:00Z"

# --- Go's side: the requests -------------------------------------------------


def go_send(agent, method, path, params=None, body=None, token=None, headers=None):
    """(status, body text, headers) of one request as Go's api client sends
    it: the query sorted, Go's transport headers, no Content-Type."""
    url = path
    if params:
        url += ("&" if "?" in path else "?") + urllib.parse.urlencode(sorted(params.items()))
    h = {"User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip"}
    if token:
        h["X-Nomad-Token"] = token
    h.update(headers or {})
    data = None
    if body is not None:
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
    conn = http.client.HTTPConnection("127.0.0.1", agent.metrics_port, timeout=90)
    try:
        conn.request(method, url, body=data, headers=h)
        r = conn.getresponse()
        return r.status, r.read().decode(), {k: v for k, v in r.getheaders()}
    finally:
        conn.close()


def go_write_request():
    """api.WriteRequest as the client leaves it: every field zero."""
    return {"Region": "", "Namespace": "", "SecretID": ""}


def go_volume(vid, plugin, external_id="", caps=None, secrets=None, name=""):
    """api.CSIVolume as json.Encoder writes it, every field in the struct's
    order, the ones the caller did not set at their zero values."""
    return {"ID": vid, "Name": name, "ExternalID": external_id, "Namespace": "",
            "RequestedTopologies": None, "Topologies": None, "AccessMode": "",
            "AttachmentMode": "", "MountOptions": None, "Secrets": secrets, "Parameters": None,
            "Context": None, "Capacity": 0, "RequestedCapacityMin": 0, "RequestedCapacityMax": 0,
            "RequestedCapabilities": caps, "CloneID": "", "SnapshotID": "", "ReadAllocs": None,
            "WriteAllocs": None, "Allocations": None, "Schedulable": False, "PluginID": plugin,
            "Provider": "", "ProviderVersion": "", "ControllerRequired": False,
            "ControllersHealthy": 0, "ControllersExpected": 0, "NodesHealthy": 0,
            "NodesExpected": 0, "ResourceExhausted": GO_ZERO_TIME, "CreateIndex": 0,
            "ModifyIndex": 0, "CreateTime": 0, "ModifyTime": 0}


def go_snapshot(source, name="", secrets=None):
    """api.CSISnapshot as json.Encoder writes it."""
    return {"ID": "", "ExternalSourceVolumeID": "", "SizeBytes": 0, "CreateTime": 0,
            "IsReady": False, "SourceVolumeID": source, "PluginID": "", "Name": name,
            "Secrets": secrets, "Parameters": None}


def go_csi_secrets(secrets):
    """SetHeadersFromCSISecrets: k=v pairs joined by commas."""
    return {"X-Nomad-CSI-Secrets": ",".join("%s=%s" % kv for kv in secrets.items())}


CAPS = [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]

# --- Go's side: what the client reads ----------------------------------------

# The client's structs (api/csi.go, api/allocations.go, api/nodes.go of
# v1.5): field -> Go type.  "time" is time.Time (an RFC 3339 string);
# ("map", T), ("list", T); a dict is a struct, whose field NAME? is
# `json:",omitempty"` (may be left out).
TOPOLOGY = {"Segments": ("map", "string")}
ALLOC_STUB = {
    "ID": "string", "EvalID": "string", "Name": "string", "Namespace": "string",
    "NodeID": "string", "NodeName": "string", "JobID": "string", "JobType": "string",
    "JobVersion": "uint", "TaskGroup": "string", "DesiredStatus": "string",
    "DesiredDescription": "string", "ClientStatus": "string", "ClientDescription": "string",
    "TaskStates": ("map", {}), "DeploymentStatus": {}, "FollowupEvalID": "string",
    "RescheduleTracker": {}, "PreemptedAllocations": ("list", "string"),
    "PreemptedByAllocation": "string", "CreateIndex": "uint", "ModifyIndex": "uint",
    "CreateTime": "int", "ModifyTime": "int"}
VOLUME_STUB = {
    "ID": "string", "Namespace": "string", "Name": "string", "ExternalID": "string",
    "Topologies": ("list", TOPOLOGY), "AccessMode": "string", "AttachmentMode": "string",
    "CurrentReaders": "int", "CurrentWriters": "int", "Schedulable": "bool",
    "PluginID": "string", "Provider": "string", "ControllerRequired": "bool",
    "ControllersHealthy": "int", "ControllersExpected": "int", "NodesHealthy": "int",
    "NodesExpected": "int", "ResourceExhausted": "time", "CreateIndex": "uint",
    "ModifyIndex": "uint"}
VOLUME = {
    "ID": "string", "Name": "string", "ExternalID": "string", "Namespace": "string",
    "RequestedTopologies": {"Required": ("list", TOPOLOGY), "Preferred": ("list", TOPOLOGY)},
    "Topologies": ("list", TOPOLOGY), "AccessMode": "string", "AttachmentMode": "string",
    "MountOptions": {"FSType": "string", "MountFlags": ("list", "string")},
    "Secrets": ("map", "string"), "Parameters": ("map", "string"), "Context": ("map", "string"),
    "Capacity": "int", "RequestedCapacityMin": "int", "RequestedCapacityMax": "int",
    "RequestedCapabilities": ("list", {"AccessMode": "string", "AttachmentMode": "string"}),
    "CloneID": "string", "SnapshotID": "string", "ReadAllocs": ("map", {}),
    "WriteAllocs": ("map", {}), "Allocations": ("list", ALLOC_STUB), "Schedulable": "bool",
    "PluginID": "string", "Provider": "string", "ProviderVersion": "string",
    "ControllerRequired": "bool", "ControllersHealthy": "int", "ControllersExpected": "int",
    "NodesHealthy": "int", "NodesExpected": "int", "ResourceExhausted": "time",
    "CreateIndex": "uint", "ModifyIndex": "uint"}
PLUGIN_STUB = {
    "ID": "string", "Provider": "string", "ControllerRequired": "bool",
    "ControllersHealthy": "int", "ControllersExpected": "int", "NodesHealthy": "int",
    "NodesExpected": "int", "CreateIndex": "uint", "ModifyIndex": "uint"}
CSI_INFO = {
    "PluginID": "string", "AllocID": "string", "Healthy": "bool", "HealthDescription": "string",
    "UpdateTime": "time", "RequiresControllerPlugin": "bool", "RequiresTopologies": "bool",
    "ControllerInfo?": {k: "bool" for k in (
        "SupportsCreateDelete", "SupportsAttachDetach", "SupportsListVolumes",
        "SupportsGetCapacity", "SupportsCreateDeleteSnapshot", "SupportsListSnapshots",
        "SupportsClone", "SupportsReadOnlyAttach", "SupportsExpand",
        "SupportsListVolumesAttachedNodes", "SupportsCondition", "SupportsGet")},
    "NodeInfo?": {"ID": "string", "MaxVolumes": "int", "AccessibleTopology": TOPOLOGY,
                 "RequiresNodeStageVolume": "bool", "SupportsStats": "bool",
                 "SupportsExpand": "bool", "SupportsCondition": "bool"}}
PLUGIN = {
    "ID": "string", "Provider": "string", "Version": "string", "ControllerRequired": "bool",
    "Controllers": ("map", CSI_INFO), "Nodes": ("map", CSI_INFO),
    "Allocations": ("list", ALLOC_STUB), "ControllersHealthy": "int",
    "ControllersExpected": "int", "NodesHealthy": "int", "NodesExpected": "int",
    "CreateIndex": "uint", "ModifyIndex": "uint"}
SNAPSHOT = {
    "ID": "string", "ExternalSourceVolumeID": "string", "SizeBytes": "int", "CreateTime": "int",
    "IsReady": "bool", "SourceVolumeID": "string", "PluginID": "string", "Name": "string",
    "Secrets": ("map", "string"), "Parameters": ("map", "string")}
SNAPSHOT_LIST = {"Snapshots": ("list", SNAPSHOT)}  # and NextToken, when a page follows
SNAPSHOT_CREATE = {"Snapshots": ("list", SNAPSHOT)}
VOLUME_CREATE = {"Volumes": ("list", VOLUME)}
EXTERNAL_LIST = {
    "Volumes": ("list", {"ExternalID": "string", "CapacityBytes": "int",
                         "VolumeContext": ("map", "string"), "CloneID": "string",
                         "SnapshotID": "string", "PublishedExternalNodeIDs": ("list", "string"),
                         "IsAbnormal": "bool", "Status": "string"}),
    "NextToken": "string"}

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def go_decode(test, value, typ, where="body"):
    """Fails `test` where Go's decoder would fail to decode `value` into
    `typ`, or where a field of a struct is missing (berth promises every
    field of Nomad's answer).  null decodes into anything, as in Go."""
    if value is None:
        return
    if isinstance(typ, dict):
        test.assertIsInstance(value, dict, where)
        for name, t in typ.items():
            if name.endswith("?"):
                name = name[:-1]
                if name not in value:
                    continue
            test.assertIn(name, value, "%s.%s: missing" % (where, name))
            go_decode(test, value[name], t, "%s.%s" % (where, name))
    elif isinstance(typ, tuple) and typ[0] == "map":
        test.assertIsInstance(value, dict, where)
        for k, v in value.items():
            go_decode(test, v, typ[1], "%s[%s]" % (where, k))
    elif isinstance(typ, tuple) and typ[0] == "list":
        test.assertIsInstance(value, list, where)
        for i, v in enumerate(value):
            go_decode(test, v, typ[1], "%s[%d]" % (where, i))
    elif typ == "string":
        test.assertIsInstance(value, str, where)
    elif typ == "bool":
        test.assertIsInstance(value, bool, where)
    elif typ in ("int", "uint"):
        test.assertTrue(isinstance(value, int) and not isinstance(value, bool), where)
        if typ == "uint":
            test.assertGreaterEqual(value, 0, where)
    elif typ == "time":
        test.assertRegex(value, RFC3339, where)
    else:
        raise AssertionError("unknown type " + repr(typ))


def query_meta(test, headers):
    """parseQueryMeta as the client runs it: X-Nomad-Index and
    X-Nomad-LastContact parsed as unsigned integers (a failure leaves
    KnownLeader unread), then KnownLeader is "true" or not; NextToken."""
    for h in ("X-Nomad-Index", "X-Nomad-LastContact"):
        test.assertRegex(headers.get(h, ""), r"^\d+$", h)
    return {"LastIndex": int(headers["X-Nomad-Index"]),
            "LastContact": int(headers["X-Nomad-LastContact"]),
            "KnownLeader": headers.get("X-Nomad-KnownLeader") == "true",
            "NextToken": headers.get("X-Nomad-NextToken", "")}


def write_meta(test, headers):
    """parseWriteMeta: X-Nomad-Index."""
    test.assertRegex(headers.get("X-Nomad-Index", ""), r"^\d+$", "X-Nomad-Index")
    return int(headers["X-Nomad-Index"])


class NomadClientContractTest(unittest.TestCase):
    """One dev agent with a berth-hostpath of its own, asked only the way
    Nomad's client asks, in the order a user would: an empty list, create,
    register, read, claim (through berth's shell), list, plugins, snapshots,
    the plugin's own volumes, detach, deregister, delete."""

    @classmethod
    def setUpClass(cls):
        start_dev(cls, "berth-nomad-contract-")

    @classmethod
    def tearDownClass(cls):
        stop_dev(cls)

    def call(self, method, path, params=None, body=None, headers=None, token=None, status=200):
        code, text, h = go_send(self.agent, method, path, params, body, token, headers)
        self.assertEqual(code, status, "%s %s: %s" % (method, path, text))
        return (json.loads(text) if text else None), h

    def query(self, path, schema, params=None, headers=None):
        """c.query: GET, 200, the query meta, the body decoded."""
        body, h = self.call("GET", path, params, headers=headers)
        meta = query_meta(self, h)
        self.assertTrue(meta["KnownLeader"])
        self.assertEqual(meta["LastContact"], 0)
        self.assertGreaterEqual(meta["LastIndex"], 1)  # 0 would make ?index=0 a busy loop
        go_decode(self, body, schema)
        return body, meta

    def test_the_client_end_to_end(self):
        # CSIVolumes().List on an empty cluster: [] and an index of at least 1.
        listed, meta = self.query("/v1/volumes?type=csi", ("list", VOLUME_STUB))
        self.assertEqual(listed, [])

        # CSIVolumes().Create: PUT .../create, the request struct with its
        # WriteRequest flattened; answered CSIVolumeCreateResponse.
        body = dict(Volumes=[go_volume("web", "hostpath", caps=CAPS, name="web data",
                                       secrets={"token": SECRET})], **go_write_request())
        body["Volumes"][0]["RequestedCapacityMin"] = 1048576
        created, h = self.call("PUT", "/v1/volume/csi/web/create", body=body)
        go_decode(self, created, VOLUME_CREATE)
        created_index = write_meta(self, h)
        self.assertGreater(created_index, meta["LastIndex"])
        web = created["Volumes"][0]
        self.assertEqual((web["ID"], web["Name"], web["Namespace"]),
                         ("web", "web data", "default"))
        self.assertTrue(web["ExternalID"])
        self.assertIsNone(web["Secrets"])
        self.assertNotIn(SECRET, json.dumps(created))

        # CSIVolumes().Register: the same storage as "ext", with
        # WriteOptions{IdempotencyToken} (query) and the namespace in the
        # client's config (query); no answer body is read, X-Nomad-Index is.
        body = dict(Volumes=[go_volume("ext", "hostpath", external_id=web["ExternalID"],
                                       caps=CAPS)], **go_write_request())
        text_status, text, h = go_send(self.agent, "PUT", "/v1/volume/csi/ext", body=body,
                                       params={"namespace": "default",
                                               "idempotency_token": "reg-1"})
        self.assertEqual(text_status, 200, text)
        self.assertGreater(write_meta(self, h), created_index)
        # Sent again (a retry after a lost answer): the same change.
        self.call("PUT", "/v1/volume/csi/ext", body=body,
                  params={"namespace": "default", "idempotency_token": "reg-1"})

        # CSIVolumes().Info: the volume, its claiming allocs' stubs once claimed.
        ext, meta = self.query("/v1/volume/csi/ext", VOLUME)
        self.assertEqual(ext["Allocations"], [])
        r = berth(self.agent, "volume", "claim", "ext", "--alloc", "web-1", "--node", self.node)
        self.assertEqual(r.code, 0, r)
        ext, meta = self.query("/v1/volume/csi/ext", VOLUME)
        self.assertEqual(list(ext["WriteAllocs"]), ["web-1"])
        self.assertEqual(len(ext["Allocations"]), 1)
        stub = ext["Allocations"][0]
        self.assertEqual((stub["ID"], stub["NodeID"], stub["Namespace"]),
                         ("web-1", self.node, "default"))
        self.assertEqual((stub["DesiredStatus"], stub["ClientStatus"]), ("run", "running"))
        self.assertGreater(stub["CreateTime"], 10**18)  # nanoseconds, as Nomad's
        self.assertEqual(meta["LastIndex"], ext["ModifyIndex"])

        # A blocking Info (QueryOptions{WaitIndex, WaitTime}): wait "%dms".
        _, blocked = self.query("/v1/volume/csi/ext", VOLUME,
                                params={"index": meta["LastIndex"], "wait": "300ms"})
        self.assertEqual(blocked["LastIndex"], meta["LastIndex"])  # nothing changed

        # CSIVolumes().List, PluginList (prefix), a page, stale allowed.
        listed, meta = self.query("/v1/volumes?type=csi", ("list", VOLUME_STUB),
                                  params={"stale": ""})
        self.assertEqual(sorted(v["ID"] for v in listed), ["ext", "web"])
        self.assertEqual(meta["LastIndex"], max(v["ModifyIndex"] for v in listed))
        listed, _ = self.query("/v1/volumes?type=csi", ("list", VOLUME_STUB),
                               params={"prefix": "we"})
        self.assertEqual([v["ID"] for v in listed], ["web"])
        listed, meta = self.query("/v1/volumes?type=csi", ("list", VOLUME_STUB),
                                  params={"per_page": 1})
        self.assertEqual(len(listed), 1)
        self.assertTrue(meta["NextToken"])

        # CSIPlugins().List and Info.
        plugins, meta = self.query("/v1/plugins?type=csi", ("list", PLUGIN_STUB))
        self.assertEqual([p["ID"] for p in plugins], ["hostpath"])
        self.assertGreaterEqual(meta["LastIndex"], plugins[0]["ModifyIndex"])
        plugin, _ = self.query("/v1/plugin/csi/hostpath", PLUGIN)
        self.assertTrue(plugin["Controllers"][self.node]["ControllerInfo"]["SupportsListVolumes"])
        self.assertTrue(plugin["Nodes"][self.node]["NodeInfo"]["ID"])

        # CSIVolumes().CreateSnapshot: the secrets in the body and the
        # header; no Name, an IdempotencyToken: a retry finds the same one.
        secrets = {"token": SECRET}
        body = dict(Snapshots=[go_snapshot("web", secrets=secrets)], **go_write_request())
        params = {"idempotency_token": "snap-1"}
        taken, h = self.call("PUT", "/v1/volumes/snapshot", params, body,
                             go_csi_secrets(secrets))
        go_decode(self, taken, SNAPSHOT_CREATE)
        write_meta(self, h)
        snap = taken["Snapshots"][0]
        self.assertEqual((snap["SourceVolumeID"], snap["PluginID"]), ("web", "hostpath"))
        again, _ = self.call("PUT", "/v1/volumes/snapshot", params, body, go_csi_secrets(secrets))
        self.assertEqual(again["Snapshots"][0]["ID"], snap["ID"])
        self.assertNotIn(SECRET, json.dumps(taken))

        # ListSnapshotsOpts (secrets in the header) and the older ListSnapshots.
        listed, _ = self.query("/v1/volumes/snapshot", SNAPSHOT_LIST,
                               params={"plugin_id": "hostpath"}, headers=go_csi_secrets(secrets))
        self.assertEqual([s["ID"] for s in listed["Snapshots"]], [snap["ID"]])
        listed, _ = self.query("/v1/volumes/snapshot", SNAPSHOT_LIST,
                               params={"plugin_id": "hostpath", "per_page": 1})
        self.assertEqual(len(listed["Snapshots"]), 1)

        # DeleteSnapshot: ?plugin_id=&snapshot_id= and the secrets header.
        _, h = self.call("DELETE", "/v1/volumes/snapshot",
                         {"plugin_id": "hostpath", "snapshot_id": snap["ID"]},
                         headers=go_csi_secrets(secrets))
        write_meta(self, h)

        # ListExternal: the plugin's own volumes, paged by the plugin.
        external, meta = self.query("/v1/volumes/external", EXTERNAL_LIST,
                                    params={"plugin_id": "hostpath"})
        self.assertEqual([v["ExternalID"] for v in external["Volumes"]], [web["ExternalID"]])
        self.assertEqual(external["Volumes"][0]["CapacityBytes"], web["Capacity"])
        self.assertEqual(external["NextToken"], "")
        more = berth(self.agent, "volume", "create", "-", stdin=spec("more"))
        self.assertEqual(more.code, 0, more)
        seen, token = [], ""
        for _ in range(5):
            params = {"plugin_id": "hostpath", "per_page": 1}
            if token:
                params["next_token"] = token
            page, meta = self.query("/v1/volumes/external", EXTERNAL_LIST, params=params)
            seen += [v["ExternalID"] for v in page["Volumes"]]
            self.assertEqual(page["NextToken"], meta["NextToken"])
            token = page["NextToken"]
            if not token:
                break
        self.assertEqual(len(seen), 2)
        self.assertIn(web["ExternalID"], seen)

        # Detach (after the claim's release), Deregister(force=false), DeleteOpts.
        r = berth(self.agent, "volume", "release", "ext", "--alloc", "web-1")
        self.assertEqual(r.code, 0, r)
        _, h = self.call("DELETE", "/v1/volume/csi/ext/detach", {"node": self.node})
        write_meta(self, h)
        _, h = self.call("DELETE", "/v1/volume/csi/ext", {"force": "false"})
        write_meta(self, h)
        _, h = self.call("DELETE", "/v1/volume/csi/web/delete", headers=go_csi_secrets(secrets))
        write_meta(self, h)
        r = berth(self.agent, "volume", "deregister", "more")
        self.assertEqual(r.code, 0, r)
        # An empty list again: the index of the volumes' table, which the
        # deregistrations moved past every index seen before.
        listed, meta = self.query("/v1/volumes?type=csi", ("list", VOLUME_STUB))
        self.assertEqual(listed, [])
        self.assertGreater(meta["LastIndex"], ext["ModifyIndex"])
        self.assertGreater(meta["LastIndex"], created_index)

    def test_what_the_client_may_send_that_berth_checks(self):
        # Unknown fields are refused, named; so are the request's own mistakes.
        body = dict(Volumes=[go_volume("x", "hostpath", external_id="x", caps=CAPS)],
                    Bogus=1, **go_write_request())
        text = go_send(self.agent, "PUT", "/v1/volume/csi/x", body=body)
        self.assertEqual(text[0], 400, text)
        self.assertIn("'Bogus'", text[1])
        vol = go_volume("x", "hostpath", external_id="x", caps=CAPS)
        vol["Bogus"] = 1
        text = go_send(self.agent, "PUT", "/v1/volume/csi/x",
                       body=dict(Volumes=[vol], **go_write_request()))
        self.assertEqual(text[0], 400, text)
        self.assertIn("Bogus", text[1])
        snap = go_snapshot("x")
        snap["Bogus"] = 1
        text = go_send(self.agent, "PUT", "/v1/volumes/snapshot",
                       body=dict(Snapshots=[snap], **go_write_request()))
        self.assertEqual(text[0], 400, text)
        self.assertIn("Bogus", text[1])
        # One region, global: another is refused, in the query or the body.
        self.assertEqual(go_send(self.agent, "GET", "/v1/volumes?type=csi",
                                 {"region": "global"})[0], 200)
        text = go_send(self.agent, "GET", "/v1/volumes?type=csi", {"region": "eu"})
        self.assertEqual(text[0], 400, text)
        self.assertIn("region 'eu'", text[1])
        body = dict(Volumes=[go_volume("x", "hostpath", external_id="x", caps=CAPS)],
                    **go_write_request())
        body["Region"] = "eu"
        self.assertEqual(go_send(self.agent, "PUT", "/v1/volume/csi/x", body=body)[0], 400)
        self.assertEqual(go_send(self.agent, "DELETE", "/v1/volume/csi/x",
                                 {"region": "eu"})[0], 400)
        self.assertEqual(go_send(self.agent, "GET", "/v1/volumes?type=csi",
                                 {"stale": "maybe"})[0], 400)
        # The body's Namespace names the request's namespace.
        body = dict(Volumes=[go_volume("db-ns", "hostpath", caps=CAPS)], **go_write_request())
        body["Volumes"][0]["RequestedCapacityMin"] = 1048576
        body["Namespace"] = "prod"
        made, _ = self.call("PUT", "/v1/volume/csi/db-ns/create", body=body)
        self.assertEqual(made["Volumes"][0]["Namespace"], "prod")
        self.assertEqual(go_send(self.agent, "GET", "/v1/volume/csi/db-ns")[0], 404)
        self.query("/v1/volume/csi/db-ns", VOLUME, params={"namespace": "prod"})
        text = go_send(self.agent, "DELETE", "/v1/volume/csi/db-ns/delete",
                       {"namespace": "prod"})
        self.assertEqual(text[0], 200, text)
        # The external list needs its plugin.
        self.assertEqual(go_send(self.agent, "GET", "/v1/volumes/external")[0], 400)
        self.assertEqual(go_send(self.agent, "GET", "/v1/volumes/external",
                                 {"plugin_id": "nope"})[0], 404)


class NomadClientTokenTest(unittest.TestCase):
    """With --acl: the body's SecretID is a token as X-Nomad-Token is (the
    client's request structs carry it); a wrong one is refused, and one
    that disagrees with the header is a 400."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-nomad-token-")
        cls.agent = Agent(os.path.join(cls.tmp, "data"), ["--acl"]).start()
        try:
            r = berth(cls.agent, "--json", "acl", "bootstrap")
            assert r.code == 0, r
            cls.mgmt = r.json()["secret_id"]
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.agent.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_secret_id_in_the_body(self):
        body = dict(Snapshots=[go_snapshot("nope")], **go_write_request())
        self.assertEqual(go_send(self.agent, "PUT", "/v1/volumes/snapshot", body=body)[0], 403)
        body["SecretID"] = "not-a-token"
        self.assertEqual(go_send(self.agent, "PUT", "/v1/volumes/snapshot", body=body)[0], 403)
        # The management token in the body alone: past the ACLs (the volume is unknown).
        body["SecretID"] = self.mgmt
        text = go_send(self.agent, "PUT", "/v1/volumes/snapshot", body=body)
        self.assertEqual(text[0], 404, text)
        text = go_send(self.agent, "PUT", "/v1/volumes/snapshot", body=body, token="other")
        self.assertEqual(text[0], 400, text)
        self.assertIn("SecretID", text[1])
        self.assertNotIn(self.mgmt, text[1])
        # A read with the header, as the client's config sends it.
        status, text, h = go_send(self.agent, "GET", "/v1/volumes?type=csi", token=self.mgmt)
        self.assertEqual((status, json.loads(text)), (200, []))
        self.assertRegex(h["X-Nomad-Index"], r"^[1-9]\d*$")


if __name__ == "__main__":
    unittest.main()
