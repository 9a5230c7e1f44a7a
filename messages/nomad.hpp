// Nomad's CSI JSON shapes of berth's volumes and plugins (Nomad's
// api/csi.go: CSIVolumeListStub, CSIVolume, CSIPluginListStub, CSIPlugin),
// for the Nomad-compatible HTTP endpoints (docs/http-api.md), and the pure
// rules of their lists (Nomad's filters and pages).  No I/O.
//
// Never a secret: Secrets is always null and mount flags are not shown,
// as Nomad's own answers do.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/api.pb.h"
#include "messages/berth.pb.h"
#include "messages/model.hpp"

namespace berth {

// Nomad's spelling of a mode: "single-node-writer", "file-system", ...; ""
// for none (an unclaimed volume's AccessMode).
std::string nomad_mode(v1::AccessMode m);
std::string nomad_mode(v1::AttachmentMode m);

// A Go time as Nomad's JSON writes it: RFC 3339 in UTC with milliseconds;
// 0 is Go's zero time, "0001-01-01T00:00:00Z".
std::string nomad_time(int64_t unix_ms);

// GET /v1/volumes?type=csi: one entry (CSIVolumeListStub); `plugin` gives
// the health counts (null: not registered, all zero and not schedulable).
nlohmann::ordered_json nomad_volume_stub(const v1::Volume& v, const v1::Plugin* plugin);

// GET /v1/volume/csi/:id (CSIVolume): ReadAllocs and WriteAllocs map the
// claims' alloc ids to null, as Nomad's do; Allocations lists the stubs of
// the claiming allocs (writers first), from `allocs` (their records) or,
// for one without a record, from its claim alone.
nlohmann::ordered_json nomad_volume(const v1::Volume& v, const v1::Plugin* plugin,
                                    const std::vector<v1::Alloc>& allocs = {});

// An alloc as Nomad's AllocationListStub (api/allocations.go of v1.5):
// berth's alloc in Nomad's fields (Name, NodeName: the ids; TaskGroup: its
// group; DesiredStatus run or stop; ClientStatus as Nomad spells it; times
// in nanoseconds); what berth has no word for (jobs, evals, deployments,
// tasks) is empty or null.
nlohmann::ordered_json nomad_alloc_stub(const v1::Alloc& a);

// GET /v1/volumes/external: one volume as its plugin lists it
// (CSIVolumeExternalStub): ExternalID, CapacityBytes, VolumeContext,
// CloneID, SnapshotID, PublishedExternalNodeIDs, IsAbnormal, Status (the
// plugin's condition message).
nlohmann::ordered_json nomad_external_volume(const v1::ExternalVolume& v);

// GET /v1/plugins?type=csi: one entry (CSIPluginListStub).
nlohmann::ordered_json nomad_plugin_stub(const v1::Plugin& p);

// GET /v1/plugin/csi/:id (CSIPlugin): Controllers and Nodes keyed by node.
nlohmann::ordered_json nomad_plugin(const v1::Plugin& p);

// The query of GET /v1/volumes?type=csi, as Nomad reads it.
struct nomad_volume_query {
  std::string plugin_id;   // a prefix of the plugin's id
  std::string node_id;     // a prefix of a node holding a claim
  std::string prefix;      // a prefix of the volume's id
  int64_t per_page = 0;    // 0: every volume
  std::string next_token;  // "NAMESPACE.ID" of the first volume of the page
  // Nomad's filter expression over the stubs' fields (control/filter reads
  // it; applied before the page is cut).
  std::string filter;
};

// Reads the query's parameters (plugin_id, node_id, prefix, per_page,
// next_token, filter; namespace, type, index and wait are the caller's); an error
// names the parameter and what it takes.
struct nomad_query_result {
  std::optional<nomad_volume_query> query;
  std::string error;
};
nomad_query_result parse_nomad_volume_query(const std::map<std::string, std::string>& params);

// One page of the volumes that match the query, in "NAMESPACE.ID" order,
// and the token of the next page ("" on the last), as Nomad's paginator
// makes it ("NAMESPACE.ID").
struct nomad_volume_page {
  std::vector<const v1::Volume*> volumes;
  std::string next_token;
};
nomad_volume_page nomad_volumes_page(const std::vector<const v1::Volume*>& volumes,
                                     const nomad_volume_query& q);

// A volume as Nomad's register and create take it (PUT /v1/volume/csi/:id
// and .../create: one entry of the body's "Volumes", api.CSIVolume, field
// names matched without regard to case as Go's decoder does), as berth's
// spec reads it: the same problems, naming Nomad's fields.  Fields Nomad
// sets itself (Schedulable, the health counts, indexes, allocs, Capacity,
// Topologies) are ignored, as Nomad's register ignores them; an unknown
// field is a problem.
std::variant<v1::Volume, std::vector<problem>> volume_of_nomad(const nlohmann::json& in,
                                                               bool create);

// A snapshot as Nomad's snapshot endpoints give it (CSISnapshot): ID,
// ExternalSourceVolumeID, SizeBytes, CreateTime (unix seconds), IsReady,
// SourceVolumeID, PluginID, Name; Secrets null.
nlohmann::ordered_json nomad_snapshot(const v1::Snapshot& s);

// The X-Nomad-CSI-Secrets header ("k1=v1,k2=v2", split at commas, then at
// the first '='), as Nomad reads it; a pair without '=' or with an empty key
// is an error naming its position (never its text: it may be a secret).
std::variant<std::map<std::string, std::string>, std::string> parse_csi_secrets(
    const std::string& header);

// Nomad's region: berth is one region, named as Nomad's default region
// ("global").  "" or "global": ""; another: the error, naming it.
std::string nomad_region_problem(const std::string& region);

// What every Nomad write carries beside its own fields, as Nomad's clients
// send it: api.WriteOptions in the query (region, namespace,
// idempotency_token) and the request struct's embedded WriteRequest,
// flattened by Go's encoder into the body beside the request's fields
// (Region, Namespace, SecretID; the server's struct adds
// IdempotencyToken), names matched without regard to case.  A field given
// in both places must agree; an empty one is not given.
struct nomad_write {
  std::string namespace_;         // "": not given (the default namespace)
  std::string secret_id;          // the body's SecretID, an ACL token's secret
  std::string idempotency_token;  // "": none
};
struct nomad_write_result {
  std::optional<nomad_write> write;
  std::string error;  // names the field and what it takes
};
// `body`: the request's JSON object (null for a write without a body).
nomad_write_result parse_nomad_write(const std::map<std::string, std::string>& query,
                                     const nlohmann::json& body);

// Whether a body field (its name in lower case) is one of WriteRequest's,
// read by parse_nomad_write, not by the request's own parser.
bool is_nomad_write_field(const std::string& lower_name);

// The QueryOptions of a Nomad read that berth checks rather than uses
// (region: one region; stale: "", true or false, as Nomad parses it, every
// read being the leader's): "" or the error naming the parameter.
std::string nomad_read_problem(const std::map<std::string, std::string>& query);

// X-Nomad-Index of an answer: the index read or written, at least 1 (an
// index of 0 would make a blocking query of it return at once, forever).
uint64_t nomad_index(uint64_t index);

// A blocking query (?index=N&wait=D): wait until the answer's index passes
// N, at most D (Go's duration syntax: "30s", "5m"; default 5 minutes, at
// most 10, as Nomad's documentation gives them).  index 0: no wait.
struct nomad_blocking {
  uint64_t index = 0;
  int64_t wait_ms = 0;
};
struct nomad_blocking_result {
  std::optional<nomad_blocking> blocking;
  std::string error;  // Nomad's words: "Invalid index", "Invalid wait time"
};
nomad_blocking_result parse_nomad_blocking(const std::map<std::string, std::string>& params);

}  // namespace berth

namespace berth {

// Nomad's event stream (GET /v1/event/stream asked in Nomad's way, see
// docs/http-api.md): berth's events in Nomad's frames,
// {"Index": N, "Events": [{"Topic", "Type", "Key", "Namespace",
// "FilterKeys", "Index", "Payload"}]}.  berth's volume and claim events are
// Nomad's topic CSIVolume, plugin events CSIPlugin, node events Node, alloc
// events Allocation, a restore Operator.
//
// A topic as Nomad's query gives it: `Topic:key`, `Topic` (every key), `*`.
struct nomad_event_topic {
  std::string topic;      // "CSIVolume", ..., "*"
  std::string key = "*";  // an event's Key or one of its FilterKeys; "*": every
};
struct nomad_event_query {
  std::vector<nomad_event_topic> topics;  // never empty once parsed ("*:*")
  // What the journal is asked for (berth's topics); empty: every topic.
  std::vector<v1::EventTopic> berth_topics;
  // Only topics berth has no events of (Job, Evaluation, ...): the stream
  // carries heartbeats only.
  bool nothing = false;
};
struct nomad_event_query_result {
  std::optional<nomad_event_query> query;
  std::string error;  // names the topic and lists the topics
};
// `topics`: the query's topic parameters joined with commas ("" : every
// topic, as Nomad's).
nomad_event_query_result parse_nomad_event_topics(const std::string& topics);

// Whether one topic parameter is Nomad's spelling (a Nomad topic name,
// `*`, or `Topic:key`) rather than berth's ("volume", "claim", ...).
bool nomad_event_topic_spelling(const std::string& topic);

// One berth event as Nomad's event; never a secret.
nlohmann::ordered_json nomad_event(const v1::Event& e);

// Whether Nomad's event passes the query's topics and keys.
bool nomad_event_matches(const nomad_event_query& q, const nlohmann::ordered_json& event);

// The events as Nomad's frames, one per log index, in order; the events
// the query's keys leave out are dropped, and so is a frame left empty.
std::vector<nlohmann::ordered_json> nomad_event_frames(const std::vector<v1::Event>& events,
                                                       const nomad_event_query& q);

}  // namespace berth
