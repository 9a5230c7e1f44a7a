#include "apps/berthd/http_api.hpp"

#include <algorithm>
#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <cctype>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <variant>
#include <vector>

#include "actors/clock.hpp"
#include "actors/types.hpp"
#include "apps/berthd/http_route.hpp"
#include "control/filter.hpp"
#include "control/snapshots.hpp"
#include "messages/codec.hpp"
#include "messages/ids.hpp"
#include "messages/nomad.hpp"

namespace berth {

namespace http {

std::string dump(const json& j) {
  // Invalid UTF-8 (never accepted by the spec parser, but a view must not
  // throw on a civetweb thread): replaced, not fatal.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json_view error_view(int status, const std::string& message) {
  return {status, dump(json{{"error", message}})};
}

// FORBIDDEN is 403 (the UI then asks for a token), the rules' refusals 409.
int http_status_of(v1::ErrorCode code) {
  switch (code) {
    case v1::OK: return 200;
    case v1::INVALID: return 400;
    case v1::NOT_FOUND: return 404;
    case v1::REFUSED: return 409;
    case v1::FORBIDDEN: return 403;
    case v1::INTERNAL: return 500;
    default: return 503;
  }
}

renderer as_json(std::function<json(const v1::Response&)> f) {
  return [f = std::move(f)](const v1::Response& r, const params&) { return answer{dump(f(r))}; };
}

std::string param(const params& p, const std::string& key) {
  auto it = p.find(key);
  return it == p.end() ? std::string() : it->second;
}

bool flag(const params& p, const std::string& key) {
  auto v = param(p, key);
  return v == "true" || v == "1";
}

std::string missing(const params& p, std::initializer_list<const char*> keys) {
  for (const auto* k : keys)
    if (param(p, k).empty()) return std::string("parameter '") + k + "' is missing";
  return "";
}

json with_message(json j, const v1::Response& r) {
  if (!j.is_object()) j = json::object();
  j["message"] = r.message();
  return j;
}

std::string volume_namespace(const params& p) {
  auto ns = param(p, "namespace");
  return ns.empty() ? "default" : ns;
}

std::variant<v1::Response, json_view> caller::ask(v1::Request req) const {
  req.set_token(token);
  std::variant<v1::Response, json_view> out = error_view(503, "no answer");
  caf::scoped_actor self{sys};
  self->request(api, timeout, api_atom::value, wrap(std::move(req)))
      .receive(
          [&](pb<v1::Response>& x) {
            if (x.msg.error().code() != v1::OK)
              out = error_view(http_status_of(x.msg.error().code()), x.msg.error().message());
            else
              out = std::move(x.msg);
          },
          [&](caf::error& e) { out = error_view(503, to_failure(e).message); });
  return out;
}

}  // namespace http

namespace {

using namespace http;

template <class Items, class ToJson>
json array_of(const Items& items, ToJson to_json) {
  json out = json::array();
  for (const auto& x : items) out.push_back(to_json(x));
  return out;
}

// The namespace of a list: "" and "*" are every namespace.
std::string list_namespace(const params& p) {
  auto ns = param(p, "namespace");
  return ns == "*" ? "" : ns;
}

// Nomad's headers of an answer: the index of what was read or written (at
// least 1: nomad_index), and that the answer came from the leader (reads
// are answered by it once it confirmed that it leads, so it has no last
// contact to report).  Nomad's client reads X-Nomad-KnownLeader only after
// X-Nomad-LastContact parsed as a number.
std::map<std::string, std::string> nomad_headers(uint64_t index) {
  return {{"X-Nomad-Index", std::to_string(nomad_index(index))},
          {"X-Nomad-KnownLeader", "true"},
          {"X-Nomad-LastContact", "0"}};
}

// Nomad's namespace of a list: "default" unless given, "*" every one.
std::string nomad_list_namespace(const params& p) {
  auto ns = param(p, "namespace");
  if (ns.empty()) return "default";
  return ns == "*" ? "" : ns;
}

const param_doc id_doc{"id", "query", "the object's id", true};
const param_doc namespace_doc{"namespace", "query", "the volume's namespace (default: default)"};
const param_doc list_namespace_doc{"namespace", "query",
                                   "only this namespace's (default and '*': every namespace)"};
const param_doc nomad_namespace_doc{"namespace", "query",
                                    "the namespace (default: default; '*': every namespace)"};
const param_doc nomad_type_doc{"type", "query",
                               "csi: Nomad's shape (berth has CSI volumes only); absent: "
                               "berth's own shape",
                               false};

json openapi_document();

// The volumes of a Nomad register or create body ({"Volumes": [...]}, with
// the WriteRequest's fields beside it, read by answer_http), as the
// requests berth's shell would send; the namespace is the volume's, or the
// request's (default "default").
std::variant<std::vector<v1::Request>, std::string> nomad_volume_requests(const params& p,
                                                                          const std::string& body,
                                                                          bool create) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return std::string("the body is not a JSON object {\"Volumes\": [...]}");
  json volumes;
  for (const auto& [k, v] : doc.items()) {
    std::string key = k;
    for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (key == "volumes")
      volumes = v;
    else if (key != "policyoverride" && !is_nomad_write_field(key))
      return "field '" + k +
             "' is not one of the body's (Volumes, PolicyOverride, and the WriteRequest's "
             "Region, Namespace, SecretID, IdempotencyToken)";
  }
  if (!volumes.is_array() || volumes.empty())
    return std::string("the body names no volume: give {\"Volumes\": [{\"ID\": ...}, ...]}");
  std::vector<v1::Request> out;
  for (size_t i = 0; i < volumes.size(); ++i) {
    auto v = volume_of_nomad(volumes[i], create);
    if (auto* problems = std::get_if<std::vector<problem>>(&v)) {
      std::string id =
          volumes[i].is_object() && volumes[i].contains("ID") && volumes[i]["ID"].is_string()
              ? volumes[i]["ID"].get<std::string>()
              : "Volumes[" + std::to_string(i) + "]";
      return describe("volume '" + id + "'", *problems);
    }
    auto& vol = std::get<v1::Volume>(v);
    // The volume's own Namespace when it names one, else the request's.
    bool own = false;
    for (const auto& [k, val] : volumes[i].items()) {
      std::string key = k;
      for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      own |= key == "namespace" && val.is_string() && !val.get<std::string>().empty();
    }
    if (!own) vol.set_namespace_(volume_namespace(p));
    v1::Request r;
    if (create)
      *r.mutable_volume_create() = std::move(vol);
    else
      *r.mutable_volume_register() = std::move(vol);
    out.push_back(std::move(r));
  }
  return out;
}

// Nomad's answer to a register or create: the volumes as they are now.
answer nomad_volumes_answer(const std::vector<v1::Response>& all) {
  nlohmann::ordered_json volumes = nlohmann::ordered_json::array();
  uint64_t index = 0;
  for (const auto& r : all)
    for (const auto& v : r.volumes()) {
      volumes.push_back(nomad_volume(v, plugin_in(r, v.plugin_id())));
      index = std::max(index, v.modify_index());
    }
  nlohmann::ordered_json out{{"Volumes", volumes}, {"Warnings", ""}};
  return answer{out.dump(-1, ' ', false, json::error_handler_t::replace), nomad_headers(index)};
}

// The index of a Nomad answer: the latest of what it read or wrote.
uint64_t index_of_answers(const std::vector<v1::Response>& all) {
  uint64_t index = 0;
  for (const auto& r : all) {
    index = std::max(index, r.index());
    for (const auto& v : r.volumes()) index = std::max(index, v.modify_index());
  }
  return index;
}

// A write Nomad answers without a body (deregister, detach, delete): Nomad's
// client reads nothing of it but X-Nomad-Index; berth's message says what
// was done.
answer nomad_message_answer(const std::vector<v1::Response>& all) {
  std::string message;
  for (const auto& r : all) message += (message.empty() ? "" : "; ") + r.message();
  return answer{dump(json{{"message", message}}), nomad_headers(index_of_answers(all))};
}

using requests = std::variant<std::vector<v1::Request>, std::string>;

// The X-Nomad-CSI-Secrets header into a request's secrets.
std::optional<std::string> take_csi_secrets(const http_request& h,
                                            google::protobuf::Map<std::string, std::string>* out) {
  auto parsed = parse_csi_secrets(h.csi_secrets);
  if (auto* e = std::get_if<std::string>(&parsed)) return *e;
  for (auto& [k, val] : std::get<std::map<std::string, std::string>>(parsed)) (*out)[k] = val;
  return std::nullopt;
}

// Nomad's per_page of a page a plugin cuts (0: the plugin's choice).
std::variant<uint32_t, std::string> per_page_of(const params& p) {
  auto per_page = param(p, "per_page");
  if (per_page.empty()) return uint32_t{0};
  if (per_page.size() > 6 || per_page.find_first_not_of("0123456789") != std::string::npos)
    return "Expect a number for `per_page` query string parameter (got '" + per_page.substr(0, 20) +
           "')";
  return static_cast<uint32_t>(std::stoul(per_page));
}

answer nomad_snapshots_answer(const std::vector<v1::Response>& all) {
  nlohmann::ordered_json snaps = nlohmann::ordered_json::array();
  std::string next;
  for (const auto& r : all) {
    for (const auto& s : r.snapshots()) snaps.push_back(nomad_snapshot(s));
    next = r.next_page_token();
  }
  nlohmann::ordered_json out{{"Snapshots", snaps}};
  if (!next.empty()) out["NextToken"] = next;
  return answer{out.dump(-1, ' ', false, json::error_handler_t::replace),
                nomad_headers(index_of_answers(all))};
}

// The fields of Nomad's CSISnapshot a create ignores: the plugin sets them
// (Nomad's client sends every field of the struct, zero or not).
const std::set<std::string> ignored_snapshot_fields{
    "id", "externalsourcevolumeid", "sizebytes", "createtime", "isready", "pluginid"};

// Nomad's /v1/volumes/snapshot: list (GET), create (PUT or POST, a body of
// {"Snapshots": [...]}), delete (DELETE ?plugin_id=&snapshot_id=).
void add_nomad_snapshots(std::vector<route>& v) {
  route list{"GET",
             "/v1/volumes/snapshot",
             "Nomad: the snapshots of a plugin (ListSnapshots), as berth volume snapshot list",
             {{"plugin_id", "query", "the plugin (required by berth for paging)"},
              {"per_page", "query", "at most this many (NextToken names the next page)"},
              {"next_token", "query", "start at this page (the NextToken of the one before)"}},
             nullptr,
             nullptr,
             std::chrono::seconds(60)};
  list.batch = [](const params& p, const http_request& h) -> requests {
    v1::Request r;
    auto* q = r.mutable_snapshot_list();
    q->set_plugin_id(param(p, "plugin_id"));
    q->set_page_token(param(p, "next_token"));
    auto per_page = per_page_of(p);
    if (auto* e = std::get_if<std::string>(&per_page)) return *e;
    q->set_per_page(std::get<uint32_t>(per_page));
    if (auto e = take_csi_secrets(h, q->mutable_secrets())) return *e;
    return std::vector<v1::Request>{r};
  };
  list.render_batch = nomad_snapshots_answer;
  route create{"PUT",
               "/v1/volumes/snapshot",
               "Nomad: take the body's snapshots ({\"Snapshots\": [{SourceVolumeID, Name, "
               "Secrets, Parameters}]}), as berth volume snapshot create",
               {nomad_namespace_doc},
               nullptr,
               nullptr,
               std::chrono::seconds(120)};
  create.batch = [](const params& p, const http_request& h) -> requests {
    auto doc = json::parse(h.body, nullptr, false);
    if (doc.is_discarded() || !doc.is_object())
      return std::string("the body is not a JSON object {\"Snapshots\": [...]}");
    json snaps;
    for (const auto& [k, val] : doc.items()) {
      std::string key = k;
      for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (key == "snapshots")
        snaps = val;
      else if (!is_nomad_write_field(key))
        return "field '" + k +
               "' is not one of the body's (Snapshots, and the WriteRequest's Region, "
               "Namespace, SecretID, IdempotencyToken)";
    }
    // Nomad's client sends each snapshot's secrets in the body and in
    // X-Nomad-CSI-Secrets; the body's win.
    std::map<std::string, std::string> header_secrets;
    {
      auto parsed = parse_csi_secrets(h.csi_secrets);
      if (auto* e = std::get_if<std::string>(&parsed)) return *e;
      header_secrets = std::get<std::map<std::string, std::string>>(std::move(parsed));
    }
    auto token = param(p, "idempotency_token");
    if (!snaps.is_array() || snaps.empty())
      return std::string(
          "the body names no snapshot: give {\"Snapshots\": [{\"SourceVolumeID\": ...}]}");
    std::vector<v1::Request> out;
    for (size_t i = 0; i < snaps.size(); ++i) {
      auto at = "Snapshots[" + std::to_string(i) + "]";
      if (!snaps[i].is_object()) return at + " must be an object";
      v1::Request r;
      auto* c = r.mutable_snapshot_create();
      c->set_namespace_(volume_namespace(p));
      for (const auto& [k, val] : snaps[i].items()) {
        std::string key = k;
        for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        auto strings = [&](google::protobuf::Map<std::string, std::string>* m) -> bool {
          if (val.is_null()) return true;
          if (!val.is_object()) return false;
          for (const auto& [mk, mv] : val.items()) {
            if (!mv.is_string()) return false;
            (*m)[mk] = mv.get<std::string>();
          }
          return true;
        };
        if (key == "sourcevolumeid" && val.is_string())
          c->set_volume_id(val.get<std::string>());
        else if (key == "name" && val.is_string())
          c->set_name(val.get<std::string>());
        else if (key == "secrets") {
          if (!strings(c->mutable_secrets())) return at + "." + k + " must map strings to strings";
        } else if (key == "parameters") {
          if (!strings(c->mutable_parameters()))
            return at + "." + k + " must map strings to strings";
        } else if (!ignored_snapshot_fields.count(key))
          return at + "." + k + " is not a field of a snapshot create (SourceVolumeID, Name, " +
                 "Secrets, Parameters; the plugin's ID, ExternalSourceVolumeID, SizeBytes, " +
                 "CreateTime, IsReady and PluginID are ignored)";
      }
      if (c->volume_id().empty()) return at + ".SourceVolumeID is required";
      for (const auto& [hk, hv] : header_secrets) c->mutable_secrets()->insert({hk, hv});
      // A name fixed here: with an idempotency token a retry of the same
      // body finds the snapshot the first took, without one it takes another.
      if (c->name().empty())
        c->set_name(token.empty()
                        ? generated_snapshot_name(c->namespace_(), c->volume_id(), wall_ms())
                        : "berth-" + c->namespace_() + "-" + c->volume_id() + "-" +
                              id_of_key(token + "#" + std::to_string(i)));
      out.push_back(std::move(r));
    }
    return out;
  };
  create.render_batch = nomad_snapshots_answer;
  route post = create;
  post.method = "POST";
  route del{"DELETE",
            "/v1/volumes/snapshot",
            "Nomad: delete a snapshot (DeleteSnapshot), as berth volume snapshot delete",
            {{"plugin_id", "query", "the snapshot's plugin", true},
             {"snapshot_id", "query", "the snapshot", true}},
            nullptr,
            nullptr,
            std::chrono::seconds(60)};
  del.batch = [](const params& p, const http_request& h) -> requests {
    if (auto m = missing(p, {"plugin_id", "snapshot_id"}); !m.empty()) return m;
    v1::Request r;
    auto* d = r.mutable_snapshot_delete();
    d->set_plugin_id(param(p, "plugin_id"));
    d->set_snapshot_id(param(p, "snapshot_id"));
    if (auto e = take_csi_secrets(h, d->mutable_secrets())) return *e;
    return std::vector<v1::Request>{r};
  };
  del.render_batch = nomad_message_answer;
  for (auto* r : {&list, &create, &post, &del}) v.push_back(std::move(*r));
}

// Nomad's GET /v1/volumes/external?plugin_id=P: one page of the plugin's
// own volumes (ListVolumes through a controller), {"Volumes": [...],
// "NextToken": ...} as CSIVolumeListExternalResponse.
void add_nomad_external_volumes(std::vector<route>& v) {
  route list{"GET",
             "/v1/volumes/external",
             "Nomad: the volumes a plugin's controller lists (ListVolumes), one page",
             {{"plugin_id", "query", "the plugin", true},
              {"per_page", "query", "at most this many (NextToken names the next page)"},
              {"next_token", "query", "start at this page (the NextToken of the one before)"},
              nomad_namespace_doc},
             nullptr,
             nullptr,
             std::chrono::seconds(60)};
  list.batch = [](const params& p, const http_request&) -> requests {
    if (auto m = missing(p, {"plugin_id"}); !m.empty()) return m + " (the plugin to ask)";
    v1::Request r;
    auto* q = r.mutable_volume_list_external();
    q->set_namespace_(volume_namespace(p));
    q->set_plugin_id(param(p, "plugin_id"));
    q->set_page_token(param(p, "next_token"));
    auto per_page = per_page_of(p);
    if (auto* e = std::get_if<std::string>(&per_page)) return *e;
    q->set_per_page(std::get<uint32_t>(per_page));
    return std::vector<v1::Request>{r};
  };
  list.render_batch = [](const std::vector<v1::Response>& all) {
    nlohmann::ordered_json volumes = nlohmann::ordered_json::array();
    std::string next;
    for (const auto& r : all) {
      for (const auto& x : r.external_volumes()) volumes.push_back(nomad_external_volume(x));
      next = r.next_page_token();
    }
    nlohmann::ordered_json out{{"Volumes", volumes}, {"NextToken", next}};
    answer a{out.dump(-1, ' ', false, json::error_handler_t::replace),
             nomad_headers(index_of_answers(all))};
    if (!next.empty()) a.headers["X-Nomad-NextToken"] = next;
    return a;
  };
  v.push_back(std::move(list));
}

void add_nomad_writes(std::vector<route>& v) {
  auto one = [](v1::Request r) {
    return std::variant<std::vector<v1::Request>, std::string>(std::vector<v1::Request>{r});
  };
  route reg{"PUT",
            "/v1/volume/csi/:id",
            "Nomad: register the body's volumes ({\"Volumes\": [CSIVolume...]}), as berth volume "
            "register (the path's id is not used, as in Nomad)",
            {nomad_namespace_doc},
            nullptr,
            nullptr,
            std::chrono::seconds(60)};
  reg.batch = [](const params& p, const http_request& h) {
    return nomad_volume_requests(p, h.body, false);
  };
  reg.render_batch = nomad_volumes_answer;
  route create = reg;
  create.path = "/v1/volume/csi/:id/create";
  create.summary =
      "Nomad: create the body's volumes through their plugins (CreateVolume), as berth volume "
      "create";
  create.batch = [](const params& p, const http_request& h) {
    return nomad_volume_requests(p, h.body, true);
  };
  route dereg{"DELETE",
              "/v1/volume/csi/:id",
              "Nomad: deregister the volume (force=true: even while claimed), as berth volume "
              "deregister",
              {namespace_doc, {"force", "query", "true: even while claimed"}},
              nullptr,
              nullptr,
              std::chrono::seconds(60)};
  dereg.batch = [one](const params& p,
                      const http_request&) -> std::variant<std::vector<v1::Request>, std::string> {
    auto force = param(p, "force");
    if (!force.empty() && force != "true" && force != "false")
      return "invalid force value '" + force + "': true or false";
    v1::Request r;
    auto* d = r.mutable_volume_deregister();
    d->set_namespace_(volume_namespace(p));
    d->set_volume_id(param(p, "id"));
    d->set_force(force == "true");
    return one(std::move(r));
  };
  dereg.render_batch = nomad_message_answer;
  route del = dereg;
  del.path = "/v1/volume/csi/:id/delete";
  del.summary =
      "Nomad: delete the volume through its plugin (DeleteVolume), as berth volume delete";
  del.docs = {namespace_doc};
  del.batch = [one](const params& p,
                    const http_request& h) -> std::variant<std::vector<v1::Request>, std::string> {
    v1::Request r;
    auto* d = r.mutable_volume_delete();
    d->set_namespace_(volume_namespace(p));
    d->set_volume_id(param(p, "id"));
    if (auto e = take_csi_secrets(h, d->mutable_secrets())) return *e;
    return one(std::move(r));
  };
  route detach = dereg;
  detach.path = "/v1/volume/csi/:id/detach";
  detach.summary = "Nomad: detach the volume from a node, as berth volume detach";
  detach.docs = {namespace_doc, {"node", "query", "the node to detach it from", true}};
  detach.batch = [one](const params& p,
                       const http_request&) -> std::variant<std::vector<v1::Request>, std::string> {
    if (param(p, "node").empty()) return std::string("detach requires node ID (?node=NODE)");
    v1::Request r;
    auto* d = r.mutable_volume_detach();
    d->set_namespace_(volume_namespace(p));
    d->set_volume_id(param(p, "id"));
    d->set_node_id(param(p, "node"));
    return one(std::move(r));
  };
  for (auto* r : {&reg, &create, &dereg, &del, &detach}) v.push_back(std::move(*r));
  add_nomad_snapshots(v);
  add_nomad_external_volumes(v);
}

// A server as Nomad's status endpoints name it: its Raft address, or its
// shell endpoint when it has no Raft link (berthd --dev).
std::string peer_address(const v1::ServerInfo& s) {
  return s.raft_address().empty() ? s.api_address() : s.raft_address();
}

const std::vector<route>& routes() {
  static const std::vector<route> all = [] {
    std::vector<route> v = {
        {"GET",
         "/v1/status",
         "this berthd: its name, role and versions",
         {},
         [](const params&) -> built {
           v1::Request r;
           r.mutable_agent_status();
           return r;
         },
         as_json([](const v1::Response& r) { return agent_json(r.agent()); })},
        // Nomad's list (GET /v1/volumes?type=csi): CSIVolumeListStub entries.
        {"GET",
         "/v1/volumes",
         "Nomad: the CSI volumes (CSIVolumeListStub), paged",
         {nomad_type_doc,
          nomad_namespace_doc,
          {"plugin_id", "query", "only volumes of a plugin whose id starts with this"},
          {"node_id", "query", "only volumes claimed on a node whose id starts with this"},
          {"prefix", "query", "only volumes whose id starts with this"},
          {"per_page", "query",
           "at most this many (the X-Nomad-NextToken header names the next page)"},
          {"next_token", "query", "start at this page (X-Nomad-NextToken of the page before)"},
          {"filter", "query",
           "Nomad's filter expression over the stubs' fields, e.g. PluginID == \"hostpath\" "
           "and Schedulable == true (==, !=, contains, in, is empty, and, or, not)"}},
         [](const params& p) -> built {
           auto q = parse_nomad_volume_query(p);
           if (!q.query) return q.error;
           auto f = parse_filter(q.query->filter);
           if (auto* bad = std::get_if<failure>(&f)) return "filter: " + bad->message;
           v1::Request r;
           r.mutable_volume_list()->set_namespace_(nomad_list_namespace(p));
           return r;
         },
         [](const v1::Response& r, const params& p) {
           auto query = *parse_nomad_volume_query(p).query;
           auto f = std::get<filter>(parse_filter(query.filter));
           std::vector<const v1::Volume*> all;
           uint64_t index = r.index();  // the table's: an empty list has one too
           for (const auto& v : r.volumes()) {
             index = std::max(index, v.modify_index());
             // Nomad's filter reads the stub's fields (PluginID, Schedulable, ...).
             if (!f.empty() &&
                 !f.matches(json::parse(nomad_volume_stub(v, plugin_in(r, v.plugin_id())).dump())))
               continue;
             all.push_back(&v);
           }
           auto page = nomad_volumes_page(all, query);
           nlohmann::ordered_json out = nlohmann::ordered_json::array();
           for (const auto* v : page.volumes)
             out.push_back(nomad_volume_stub(*v, plugin_in(r, v->plugin_id())));
           answer a{out.dump(-1, ' ', false, json::error_handler_t::replace), nomad_headers(index)};
           if (!page.next_token.empty()) a.headers["X-Nomad-NextToken"] = page.next_token;
           return a;
         },
         std::chrono::seconds(10),
         {"type", "csi"},
         {v1::EVENT_VOLUME, v1::EVENT_CLAIM}},
        {"GET",
         "/v1/volumes",
         "the volumes, berth's shape (as berth --json volume status)",
         {list_namespace_doc},
         [](const params& p) -> built {
           v1::Request r;
           r.mutable_volume_list()->set_namespace_(list_namespace(p));
           return r;
         },
         as_json(volumes_json)},
        {"GET",
         "/v1/volume/csi/:id",
         "Nomad: one CSI volume (CSIVolume)",
         {namespace_doc},
         [](const params& p) -> built {
           v1::Request r;
           r.mutable_volume_status()->set_namespace_(volume_namespace(p));
           r.mutable_volume_status()->set_id(param(p, "id"));
           return r;
         },
         [](const v1::Response& r, const params&) {
           if (r.volumes().empty()) return answer{"null"};
           const auto& v = r.volumes(0);
           std::vector<v1::Alloc> allocs(r.allocs().begin(), r.allocs().end());
           return answer{nomad_volume(v, plugin_in(r, v.plugin_id()), allocs)
                             .dump(-1, ' ', false, json::error_handler_t::replace),
                         nomad_headers(v.modify_index())};
         },
         std::chrono::seconds(10),
         {nullptr, nullptr},
         {v1::EVENT_VOLUME, v1::EVENT_CLAIM}},
        {"GET",
         "/v1/volume",
         "one volume, berth's shape",
         {id_doc, namespace_doc},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id"}); !m.empty()) return m;
           v1::Request r;
           r.mutable_volume_status()->set_namespace_(volume_namespace(p));
           r.mutable_volume_status()->set_id(param(p, "id"));
           return r;
         },
         as_json(single_volume_json)},
        {"GET",
         "/v1/plugins",
         "Nomad: the CSI plugins (CSIPluginListStub)",
         {nomad_type_doc},
         [](const params&) -> built {
           v1::Request r;
           r.mutable_plugin_list();
           return r;
         },
         [](const v1::Response& r, const params&) {
           nlohmann::ordered_json out = nlohmann::ordered_json::array();
           uint64_t index = r.index();  // the table's: an empty list has one too
           for (const auto& pl : r.plugins()) {
             out.push_back(nomad_plugin_stub(pl));
             index = std::max(index, pl.modify_index());
           }
           return answer{out.dump(-1, ' ', false, json::error_handler_t::replace),
                         nomad_headers(index)};
         },
         std::chrono::seconds(10),
         {"type", "csi"},
         {v1::EVENT_PLUGIN}},
        {"GET",
         "/v1/plugins",
         "the plugins, berth's shape",
         {},
         [](const params&) -> built {
           v1::Request r;
           r.mutable_plugin_list();
           return r;
         },
         as_json([](const v1::Response& r) { return array_of(r.plugins(), plugin_json); })},
        {"GET",
         "/v1/plugin/csi/:id",
         "Nomad: one CSI plugin (CSIPlugin)",
         {},
         [](const params& p) -> built {
           v1::Request r;
           r.set_plugin_status(param(p, "id"));
           return r;
         },
         [](const v1::Response& r, const params&) {
           if (r.plugins().empty()) return answer{"null"};
           return answer{
               nomad_plugin(r.plugins(0)).dump(-1, ' ', false, json::error_handler_t::replace),
               nomad_headers(r.plugins(0).modify_index())};
         },
         std::chrono::seconds(10),
         {nullptr, nullptr},
         {v1::EVENT_PLUGIN}},
        {"GET",
         "/v1/plugin",
         "one plugin, berth's shape",
         {id_doc},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id"}); !m.empty()) return m;
           v1::Request r;
           r.set_plugin_status(param(p, "id"));
           return r;
         },
         as_json([](const v1::Response& r) {
           return r.plugins().empty() ? json() : plugin_json(r.plugins(0));
         })},
        {"GET",
         "/v1/nodes",
         "the nodes",
         {},
         [](const params&) -> built {
           v1::Request r;
           r.mutable_node_list();
           return r;
         },
         as_json([](const v1::Response& r) { return array_of(r.nodes(), node_json); })},
        {"GET",
         "/v1/node",
         "one node with its volumes",
         {id_doc},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id"}); !m.empty()) return m;
           v1::Request r;
           r.set_node_status(param(p, "id"));
           return r;
         },
         as_json([](const v1::Response& r) {
           return r.nodes().empty() ? json() : node_with_volumes_json(r);
         })},
        {"GET",
         "/v1/allocs",
         "the allocs",
         {list_namespace_doc},
         [](const params& p) -> built {
           v1::Request r;
           r.mutable_alloc_list()->set_namespace_(list_namespace(p));
           return r;
         },
         as_json([](const v1::Response& r) { return array_of(r.allocs(), alloc_json); })},
        {"GET",
         "/v1/alloc",
         "one alloc with its claims",
         {id_doc},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id"}); !m.empty()) return m;
           v1::Request r;
           r.set_alloc_status(param(p, "id"));
           return r;
         },
         // The id is the alloc's own (the answer names it).
         as_json([](const v1::Response& r) {
           return r.allocs().empty() ? json() : alloc_with_claims_json(r, r.allocs(0).id());
         })},
        {"GET",
         "/v1/raft/peers",
         "the servers and their Raft state",
         {},
         [](const params&) -> built {
           v1::Request r;
           r.set_raft_list_peers(true);
           return r;
         },
         as_json([](const v1::Response& r) { return array_of(r.raft(), raft_json); })},
        // Nomad's: the leader's and the peers' Raft addresses (a single dev
        // server has no Raft link: its shell endpoint).
        {"GET",
         "/v1/status/leader",
         "Nomad: the leader's Raft address (\"\" without a leader)",
         {},
         [](const params&) -> built {
           v1::Request r;
           r.set_raft_list_peers(true);
           return r;
         },
         as_json([](const v1::Response& r) {
           for (const auto& s : r.raft())
             if (s.role() == "leader") return json(peer_address(s.server()));
           return json("");
         })},
        {"GET",
         "/v1/status/peers",
         "Nomad: the servers' Raft addresses",
         {},
         [](const params&) -> built {
           v1::Request r;
           r.set_raft_list_peers(true);
           return r;
         },
         as_json([](const v1::Response& r) {
           json out = json::array();
           for (const auto& s : r.raft()) out.push_back(peer_address(s.server()));
           return out;
         })},
        {"GET",
         "/v1/openapi.json",
         "this API as an OpenAPI 3 document",
         {},
         nullptr,
         nullptr,
         std::chrono::seconds(10),
         {nullptr, nullptr},
         {},
         [] { return answer{dump(openapi_document())}; }},
        // berth alloc stop ID: waits for the releases (up to 30 s).
        {"POST",
         "/v1/alloc/stop",
         "berth alloc stop ID (waits for the releases)",
         {{"id", "body", "the alloc", true}},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id"}); !m.empty()) return m;
           v1::Request r;
           r.set_alloc_stop(param(p, "id"));
           return r;
         },
         as_json([](const v1::Response& r) {
           return with_message(r.allocs().empty() ? json() : alloc_json(r.allocs(0)), r);
         }),
         std::chrono::seconds(60)},
        // berth volume claim ID --alloc A --node N [--read-only] [--access-mode M]
        {"POST",
         "/v1/volume/claim",
         "berth volume claim ID --alloc A --node N (publishes the volume on the node)",
         {{"id", "body", "the volume", true},
          {"alloc", "body", "the alloc the claim is for", true},
          {"node", "body", "the node to publish it on", true},
          {"namespace", "body", "the volume's namespace (default: default)"},
          {"read_only", "body", "true: a read claim"},
          {"access_mode", "body", "which of the volume's capabilities (e.g. single-node-writer)"},
          {"attachment_mode", "body", "file-system or block-device"}},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id", "alloc", "node"}); !m.empty()) return m;
           v1::Request r;
           auto* c = r.mutable_volume_claim();
           c->set_namespace_(volume_namespace(p));
           c->set_volume_id(param(p, "id"));
           c->set_alloc_id(param(p, "alloc"));
           c->set_node_id(param(p, "node"));
           c->set_read_only(flag(p, "read_only"));
           if (auto a = param(p, "access_mode"); !a.empty()) {
             auto m = parse_access_mode(a);
             if (!m) return "access_mode '" + a + "' is not one of " + access_mode_names();
             c->set_access_mode(*m);
           }
           if (auto a = param(p, "attachment_mode"); !a.empty()) {
             auto m = parse_attachment_mode(a);
             if (!m) return "attachment_mode '" + a + "' is not one of " + attachment_mode_names();
             c->set_attachment_mode(*m);
           }
           return r;
         },
         as_json([](const v1::Response& r) {
           auto j = with_message(single_volume_json(r), r);
           j["published_path"] = r.published_path();
           return j;
         }),
         std::chrono::seconds(120)},
        // berth volume release ID --alloc A
        {"POST",
         "/v1/volume/release",
         "berth volume release ID --alloc A (unpublishes it and frees the claim)",
         {{"id", "body", "the volume", true},
          {"alloc", "body", "the alloc whose claim is released", true},
          {"namespace", "body", "the volume's namespace (default: default)"}},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id", "alloc"}); !m.empty()) return m;
           v1::Request r;
           auto* rel = r.mutable_volume_release();
           rel->set_namespace_(volume_namespace(p));
           rel->set_volume_id(param(p, "id"));
           rel->set_alloc_id(param(p, "alloc"));
           return r;
         },
         as_json([](const v1::Response& r) { return with_message(single_volume_json(r), r); }),
         std::chrono::seconds(120)},
        // berth volume detach ID NODE [--namespace NS]
        {"POST",
         "/v1/volume/detach",
         "berth volume detach ID NODE",
         {{"id", "body", "the volume", true},
          {"node", "body", "the node to detach it from", true},
          {"namespace", "body", "the volume's namespace (default: default)"}},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id", "node"}); !m.empty()) return m;
           v1::Request r;
           auto* d = r.mutable_volume_detach();
           d->set_namespace_(volume_namespace(p));
           d->set_volume_id(param(p, "id"));
           d->set_node_id(param(p, "node"));
           return r;
         },
         as_json([](const v1::Response& r) { return with_message(single_volume_json(r), r); }),
         std::chrono::seconds(60)},
        // berth node drain ID [--deadline D | --no-deadline | --force] [--disable]
        {"POST",
         "/v1/node/drain",
         "berth node drain ID",
         {{"id", "body", "the node", true},
          {"deadline", "body", "how long the allocs have (default 1h)"},
          {"no_deadline", "body", "true: no deadline"},
          {"force", "body", "true: now"},
          {"disable", "body", "true: end the drain"},
          {"keep_ineligible", "body", "with disable: stay ineligible"},
          {"keep_plugins", "body", "true: the node's plugins keep serving"}},
         [](const params& p) -> built {
           if (auto m = missing(p, {"id"}); !m.empty()) return m;
           v1::Request r;
           auto* d = r.mutable_node_drain();
           d->set_node_id(param(p, "id"));
           d->set_keep_plugins(flag(p, "keep_plugins"));
           if (flag(p, "disable")) {
             d->set_disable(true);
             d->set_keep_ineligible(flag(p, "keep_ineligible"));
           } else if (flag(p, "no_deadline")) {
             d->set_no_deadline(true);
           } else if (!flag(p, "force")) {
             auto text = param(p, "deadline").empty() ? "1h" : param(p, "deadline");
             auto ms = parse_duration_ms(text);
             if (!ms || *ms == 0)
               return "deadline '" + text +
                      "' is not a duration such as 30m, 1h or 90s (for none: no_deadline=true; "
                      "for now: force=true)";
             d->set_deadline_ms(*ms);
           }
           return r;
         },
         as_json(node_message_json),
         std::chrono::seconds(30)},
    };
    add_nomad_writes(v);
    add_shell_commands(v);
    return v;
  }();
  return all;
}

// The path's parameters when `path` matches the route's (":NAME" takes one
// non-empty segment), else nullopt.
std::optional<params> match_path(const std::string& pattern, const std::string& path) {
  params out;
  size_t i = 0, j = 0;
  while (i < pattern.size() && j < path.size()) {
    if (pattern[i] == ':') {
      auto end_p = pattern.find('/', i);
      auto end = path.find('/', j);
      auto name =
          pattern.substr(i + 1, end_p == std::string::npos ? std::string::npos : end_p - i - 1);
      auto value = path.substr(j, end == std::string::npos ? std::string::npos : end - j);
      if (value.empty()) return std::nullopt;
      out[name] = value;
      i = end_p == std::string::npos ? pattern.size() : end_p;
      j = end == std::string::npos ? path.size() : end;
      continue;
    }
    if (pattern[i] != path[j]) return std::nullopt;
    ++i;
    ++j;
  }
  if (i != pattern.size() || j != path.size()) return std::nullopt;
  return out;
}

// "/v1/volume/csi/:id" as OpenAPI writes it: "/v1/volume/csi/{id}".
std::string openapi_path(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] != ':') {
      out += pattern[i++];
      continue;
    }
    auto end = pattern.find('/', i);
    auto name = pattern.substr(i + 1, end == std::string::npos ? std::string::npos : end - i - 1);
    out += "{" + name + "}";
    i = end == std::string::npos ? pattern.size() : end;
  }
  return out;
}

json openapi_document() {
  json paths = json::object();
  for (const auto& r : routes()) {
    std::string method = r.method;
    for (auto& ch : method) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    auto& op = paths[openapi_path(r.path)][method];
    // Routes on one path told apart by a query parameter (type=csi) are one
    // operation: their summaries are joined and their parameters merged.
    std::string summary = r.summary;
    if (r.when.first != nullptr)
      summary = std::string(r.when.first) + "=" + r.when.second + ": " + summary;
    if (op.contains("summary"))
      op["summary"] = op["summary"].get<std::string>() + "; " + summary;
    else
      op["summary"] = summary;
    if (!op.contains("parameters")) op["parameters"] = json::array();
    auto add = [&](json p) {
      for (const auto& have : op["parameters"])
        if (have["name"] == p["name"] && have["in"] == p["in"]) return;
      op["parameters"].push_back(std::move(p));
    };
    std::string pattern = r.path;
    for (size_t i = pattern.find(':'); i != std::string::npos; i = pattern.find(':', i + 1)) {
      auto end = pattern.find('/', i);
      add(json{{"name",
                pattern.substr(i + 1, end == std::string::npos ? std::string::npos : end - i - 1)},
               {"in", "path"},
               {"required", true},
               {"schema", {{"type", "string"}}}});
    }
    if (!r.wakes_on.empty()) {
      add(json{{"name", "index"},
               {"in", "query"},
               {"description", "a blocking query: answer once X-Nomad-Index passes this"},
               {"schema", {{"type", "string"}}}});
      add(json{{"name", "wait"},
               {"in", "query"},
               {"description", "with index: wait at most this long (default 5m, at most 10m)"},
               {"schema", {{"type", "string"}}}});
    }
    for (const auto& d : r.docs) {
      // A POST takes its scalar parameters in the query or its JSON body.
      std::string type = d.type;
      if (type == "array" || type == "object") continue;
      add(json{{"name", d.name},
               {"in", "query"},
               {"required", d.required && std::string(d.in) != "body"},
               {"description", d.description},
               {"schema", {{"type", "string"}}}});
    }
    bool nomad_body =
        r.batch && std::string(r.method) != "GET" && std::string(r.method) != "DELETE";
    if (nomad_body)
      op["requestBody"] = {
          {"required", true},
          {"content",
           {{"application/json",
             {{"schema",
               {{"type", "object"},
                {"description",
                 "Nomad's request body: {\"Volumes\": [CSIVolume...]} (register, create) or "
                 "{\"Snapshots\": [...]} (snapshot create)"},
                {"properties",
                 {{"Volumes", {{"type", "array"}, {"items", {{"type", "object"}}}}},
                  {"Snapshots", {{"type", "array"}, {"items", {{"type", "object"}}}}},
                  {"PolicyOverride", {{"type", "boolean"}}}}}}}}}}}};
    if (r.raw_body) {
      bool bytes = std::string(r.method) == "PUT";
      json schema = bytes ? json{{"type", "string"}, {"format", "binary"}}
                          : json{{"type", "object"},
                                 {"description",
                                  "the volume spec, as berth volume init writes it "
                                  "(docs/user-guide.md), in JSON"}};
      json content = json::object();
      content[bytes ? "application/octet-stream" : "application/json"] = {{"schema", schema}};
      op["requestBody"] = {{"required", true}, {"content", content}};
    } else if (std::string(r.method) == "POST" && !nomad_body) {
      json props = json::object();
      json required = json::array();
      for (const auto& d : r.docs) {
        std::string type = d.type;
        json schema{{"type", type}, {"description", d.description}};
        if (type == "array") schema["items"] = {{"type", "string"}};
        if (type == "object") schema["additionalProperties"] = {{"type", "string"}};
        props[d.name] = schema;
        if (d.required) required.push_back(d.name);
      }
      json schema{{"type", "object"}, {"properties", props}};
      if (!required.empty())
        schema["description"] = "required in the body or the query: " + required.dump();
      op["requestBody"] = {{"required", false},
                           {"content", {{"application/json", {{"schema", schema}}}}}};
    }
    json error_body{
        {"description", "the error, naming the object and the fix"},
        {"content",
         {{"application/json",
           {{"schema",
             {{"type", "object"}, {"properties", {{"error", {{"type", "string"}}}}}}}}}}}};
    bool octets = std::string(r.method) == "GET" && std::string(r.path) == "/v1/operator/snapshot";
    json ok_content = json::object();
    ok_content[octets ? "application/octet-stream" : "application/json"] = {
        {"schema", octets ? json{{"type", "string"}, {"format", "binary"}} : json::object()}};
    op["responses"] = {{"200", {{"description", "the answer"}, {"content", ok_content}}},
                       {"400", error_body},
                       {"403", error_body},
                       {"404", error_body},
                       {"409", error_body},
                       {"503", error_body}};
  }
  // The streamed path is served beside the table (metrics_server).
  paths["/v1/event/stream"]["get"] = {
      {"summary", "the event stream as newline-delimited JSON (berth event stream)"},
      {"description",
       "berth's events, one per line; asked in Nomad's way (a topic spelled as Nomad's: "
       "CSIVolume, CSIPlugin, Node, Allocation, Operator, *, or Topic:key; or the "
       "X-Nomad-Token header) Nomad's frames {\"Index\", \"Events\"}, the backlog first. A "
       "{} line is a heartbeat."},
      {"parameters",
       json::array(
           {json{{"name", "index"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
            json{{"name", "topic"},
                 {"in", "query"},
                 {"description", "berth's topics (volume,claim,...) or Nomad's (Topic:key)"},
                 {"schema", {{"type", "string"}}}},
            json{{"name", "namespace"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
            json{{"name", "until_index"}, {"in", "query"}, {"schema", {{"type", "string"}}}}})},
      {"responses",
       {{"200", {{"description", "one JSON object per line (a berth event or a Nomad frame)"}}},
        {"400", {{"description", "a bad parameter or topic, named"}}},
        {"403", {{"description", "the token may not read these events"}}},
        {"410", {{"description", "berth's stream: the index is no longer kept"}}}}}};
  paths["/v1/agent/monitor"]["get"] = {
      {"summary", "berth monitor: the server's log lines (or a node's client's), streamed"},
      {"description",
       "The newest `lines` first, then each as it is written, until the caller closes. "
       "plain=true: text; else Nomad's frames {\"Data\": base64}, {} a heartbeat."},
      {"parameters",
       json::array({json{{"name", "log_level"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
                    json{{"name", "node_id"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
                    json{{"name", "lines"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
                    json{{"name", "plain"}, {"in", "query"}, {"schema", {{"type", "string"}}}}})},
      {"responses",
       {{"200", {{"description", "the lines (text) or one JSON frame per line"}}},
        {"400", {{"description", "a bad parameter, named"}}},
        {"403", {{"description", "the token may not read the agent's lines"}}},
        {"404", {{"description", "no such node"}}}}}};
  return json{{"openapi", "3.0.3"},
              {"info",
               {{"title", "berth HTTP API"},
                {"version", "1"},
                {"description",
                 "berthd's /v1/ API on its metrics port (docs/http-api.md). A token goes in "
                 "X-Berth-Token, X-Nomad-Token or Authorization: Bearer."}}},
              {"paths", paths}};
}

// A POST's parameters: the query's, and the JSON body's fields (strings,
// numbers and booleans).  Only application/json is taken: a form another
// site's page posts cross-origin is text/plain or form data, and a JSON
// request from another origin needs a preflight this server never allows.
std::variant<params, json_view> post_params(const http_request& req) {
  if (req.content_type != "application/json")
    return error_view(415, "send the parameters as a JSON object with Content-Type: "
                           "application/json");
  params p = req.query;
  if (req.body.empty()) return p;
  auto body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return error_view(400, "the body is not a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (value.is_string())
      p[key] = value.get<std::string>();
    else if (value.is_boolean() || value.is_number())
      p[key] = value.dump();
    else
      return error_view(400, "field '" + key + "' must be a string, a number or a boolean");
  }
  return p;
}

// A body of arrays and objects (build_body, exec): the query's and the
// body's scalar fields as parameters, and the body; a field the route does
// not document is refused, naming the ones it takes.
std::variant<std::pair<params, json>, json_view> body_params(const http_request& req,
                                                             const route& r) {
  if (req.method == "POST" && req.content_type != "application/json")
    return error_view(415, "send the body as a JSON object with Content-Type: application/json");
  params p = req.query;
  json body = json::object();
  if (!req.body.empty()) body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return error_view(400, "the body is not a JSON object");
  for (const auto& [key, value] : body.items()) {
    const param_doc* doc = nullptr;
    for (const auto& d : r.docs)
      if (key == d.name) doc = &d;
    if (doc == nullptr) {
      std::string names;
      for (const auto& d : r.docs) names += (names.empty() ? "" : ", ") + std::string(d.name);
      return error_view(400, "field '" + key + "' is not one of " + r.path + "'s (" + names + ")");
    }
    std::string type = doc->type;
    bool ok = type == "array"     ? value.is_array()
              : type == "object"  ? value.is_object()
              : type == "boolean" ? value.is_boolean()
              : type == "integer" ? value.is_number_integer()
                                  : value.is_string();
    if (!ok && !value.is_null())
      return error_view(400, "field '" + key + "' must be " +
                                 (type == "array"     ? "an array of strings"
                                  : type == "object"  ? "an object of strings"
                                  : type == "integer" ? "an integer"
                                                      : "a " + type));
    if (value.is_string())
      p[key] = value.get<std::string>();
    else if (value.is_boolean() || value.is_number())
      p[key] = value.dump();
  }
  return std::make_pair(std::move(p), std::move(body));
}

// What a batch did before it stopped ("" when nothing).
std::string done_before(const std::vector<v1::Response>& done) {
  if (done.empty()) return "";
  std::string out = " (done before it:";
  for (const auto& d : done) out += " " + d.message() + ";";
  out.back() = ')';
  return out;
}

json_view view_of(answer a) {
  return json_view{200, std::move(a.body), std::move(a.headers), std::move(a.content_type)};
}

json_view send(const caller& c, v1::Request req, const route& r, const params& p) {
  auto got = c.ask(std::move(req));
  if (auto* refused = std::get_if<json_view>(&got)) return *refused;
  return view_of(r.render(std::get<v1::Response>(got), p));
}

// Nomad's writes: each request in turn, stopping at the first refusal
// (which names what was done before it).
json_view send_batch(const caller& c, std::vector<v1::Request> all, const route& r) {
  std::vector<v1::Response> done;
  for (auto& req : all) {
    auto got = c.ask(std::move(req));
    if (auto* refused = std::get_if<json_view>(&got)) {
      auto why = json::parse(refused->body, nullptr, false);
      std::string message = why.is_object() && why.contains("error") && why["error"].is_string()
                                ? why["error"].get<std::string>()
                                : std::string("no answer");
      return error_view(refused->status, message + done_before(done));
    }
    done.push_back(std::get<v1::Response>(std::move(got)));
  }
  return view_of(r.render_batch(done));
}

// The X-Nomad-Index of an answer (0: none).
uint64_t index_of(const json_view& v) {
  auto it = v.headers.find("X-Nomad-Index");
  if (it == v.headers.end() || it->second.empty()) return 0;
  return std::stoull(it->second);
}

// Blocking queries held at once on this server: each holds one of the
// HTTP threads, so that beyond this the UI and the shell's scripts still
// get theirs.
std::atomic<int> blocking_queries{0};
constexpr int most_blocking_queries = 4;

// Nomad's blocking query: answers at once when the index passed
// `b.index`; else waits for an event of the route's topics after it (this
// server's event journal, as the event stream does) for up to `b.wait_ms`,
// then reads again.  The answer's index is the later of what it read and
// the last event seen, so a removal (which leaves no object to carry its
// index) also ends the wait.  No guarantee of a change, as Nomad says.
json_view send_blocking(const caller& c, const v1::Request& req, const route& r, const params& p,
                        const nomad_blocking& b) {
  auto first = send(c, req, r, p);
  if (b.index == 0 || first.status != 200 || index_of(first) > b.index) return first;
  if (++blocking_queries > most_blocking_queries) {
    --blocking_queries;
    return error_view(503, "too many blocking queries on this server (at most " +
                               std::to_string(most_blocking_queries) +
                               "); ask another server or again without index");
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(b.wait_ms);
  uint64_t from = b.index + 1, seen = 0;
  caf::scoped_actor self{c.sys};
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    v1::Request events;
    auto* e = events.mutable_event_stream();
    e->set_index(from);
    for (auto t : r.wakes_on) e->add_topics(t);
    e->set_wait_ms(static_cast<uint32_t>(std::min<int64_t>(left.count(), 60'000)));
    events.set_token(c.token);
    std::optional<v1::Response> resp;
    self->request(c.api, std::chrono::milliseconds(e->wait_ms()) + std::chrono::seconds(30),
                  api_atom::value, wrap(std::move(events)))
        .receive([&](pb<v1::Response>& x) { resp = std::move(x.msg); }, [](caf::error&) {});
    // An index older than the journal keeps (or no answer): read again now.
    if (!resp || resp->error().code() != v1::OK) break;
    for (const auto& ev : resp->events()) seen = std::max(seen, ev.index());
    if (seen != 0) break;
    from = std::max(from, resp->next_index());
  }
  --blocking_queries;
  auto again = send(c, req, r, p);
  if (again.status == 200 && seen > index_of(again))
    again.headers["X-Nomad-Index"] = std::to_string(seen);
  return again;
}

}  // namespace

// Every path of the table once, as a 404 names them.
static std::string path_list() {
  std::string out;
  std::set<std::string> seen;
  for (const auto& r : routes())
    if (seen.insert(r.path).second) out += (out.empty() ? "" : ", ") + std::string(r.path);
  return out + ", /v1/event/stream, /v1/agent/monitor";
}

std::optional<json_view> answer_http(caf::actor_system& sys, const api_actor& api,
                                     const std::string& node_name, const http_request& req) {
  const route* found = nullptr;
  params path_params;
  bool other_method = false;
  for (const auto& r : routes()) {
    auto matched = match_path(r.path, req.path);
    if (!matched) continue;
    if (req.method != r.method) {
      other_method = true;
      continue;
    }
    if (r.when.first != nullptr) {
      auto given = req.query.find(r.when.first);
      if (given == req.query.end()) continue;  // the next route of the path
      if (given->second != r.when.second)
        return error_view(400, std::string("parameter '") + r.when.first + "' takes '" +
                                   r.when.second + "' on " + req.path + " (berth has " +
                                   r.when.second +
                                   " volumes and plugins only), or leave it "
                                   "out for berth's own shape");
    }
    found = &r;
    path_params = std::move(*matched);
    break;
  }
  if (found == nullptr) {
    if (!other_method)
      return error_view(404, "no such path; the paths are " + path_list() +
                                 " (all of it, with parameters: GET /v1/openapi.json)");
    return error_view(405, "method " + req.method + " is not allowed on " + req.path +
                               " (the views are GET, the actions POST, Nomad's writes PUT and "
                               "DELETE; all of it: GET /v1/openapi.json)");
  }
  if (found->local) return view_of(found->local());
  if (!api) {
    if (req.path == "/v1/status")
      return json_view{200, dump(json{{"node_name", node_name}, {"server", false}})};
    return error_view(404, "this berthd is a client; ask a server");
  }
  if (req.body_too_large)
    return error_view(413, "the body is larger than this path takes (" +
                               std::to_string(body_limit(req.path) / 1024) + " KiB)");
  std::string token = req.token;
  params p = req.query;
  if (is_nomad(*found) && req.method == "GET") {
    if (auto e = nomad_read_problem(req.query); !e.empty()) return error_view(400, e);
  } else if (is_nomad(*found)) {
    // A POST needs a JSON body (a form another site's page posts is not);
    // a PUT or DELETE from another origin needs a preflight never allowed.
    if (req.method == "POST" && req.content_type != "application/json")
      return error_view(415,
                        "send the body as JSON with Content-Type: application/json (or "
                        "use PUT, as Nomad's client does)");
    auto body = req.body.empty() ? json() : json::parse(req.body, nullptr, false);
    auto w = parse_nomad_write(req.query, body.is_discarded() ? json() : body);
    if (!w.write) return error_view(400, w.error);
    // The body's SecretID is a token, as the X-Nomad-Token header is.
    if (!w.write->secret_id.empty()) {
      if (!token.empty() && token != w.write->secret_id)
        return error_view(400,
                          "the body's SecretID and the request's token header differ: give "
                          "one");
      token = w.write->secret_id;
    }
    if (!w.write->namespace_.empty()) p["namespace"] = w.write->namespace_;
    p["idempotency_token"] =
        w.write->idempotency_token.empty() ? req.idempotency_key : w.write->idempotency_token;
  }
  const caller c{sys, api, token, found->timeout};
  if (found->batch) {
    for (auto& [k, v] : path_params) p[k] = v;
    auto requests = found->batch(p, req);
    if (auto* problem = std::get_if<std::string>(&requests)) return error_view(400, *problem);
    return send_batch(c, std::get<std::vector<v1::Request>>(std::move(requests)), *found);
  }
  json body = json::object();
  if (found->raw_body) {
    // exec reads the body itself.
  } else if (found->build_body || found->exec) {
    auto parsed = body_params(req, *found);
    if (auto* refused = std::get_if<json_view>(&parsed)) return *refused;
    std::tie(p, body) = std::get<std::pair<params, json>>(std::move(parsed));
  } else if (req.method == "POST") {
    auto pp = post_params(req);
    if (auto* refused = std::get_if<json_view>(&pp)) return *refused;
    p = std::move(std::get<params>(pp));
  }
  for (auto& [k, v] : path_params) p[k] = v;  // the path's own win
  if (found->exec) return found->exec(c, p, body, req);
  auto b = found->build_body ? found->build_body(p, body, req) : found->build(p);
  if (auto* problem = std::get_if<std::string>(&b)) return error_view(400, *problem);
  auto& request = std::get<v1::Request>(b);
  if (found->wakes_on.empty()) return send(c, std::move(request), *found, p);
  auto blocking = parse_nomad_blocking(p);
  if (!blocking.blocking) return error_view(400, blocking.error);
  return send_blocking(c, std::move(request), *found, p, *blocking.blocking);
}

// One poll of a streamed path (the event stream, the monitor): the answer,
// or why there is none (the answer's own error, or the request's).
static std::pair<std::optional<v1::Response>, std::string> poll_api(caf::scoped_actor& self,
                                                                    const api_actor& api,
                                                                    v1::Request r) {
  std::optional<v1::Response> resp;
  std::string why = "no answer";
  self->request(api, std::chrono::seconds(30), api_atom::value, wrap(std::move(r)))
      .receive([&](pb<v1::Response>& x) { resp = std::move(x.msg); },
               [&](caf::error& e) { why = to_failure(e).message; });
  if (resp && resp->error().code() != v1::OK) why = resp->error().message();
  return {std::move(resp), why};
}

// Answered by this server from its own journal, like the shell's; a `{}`
// line every 10 s without events is a heartbeat: the stream notices a
// client that went away.  Asked in Nomad's way (a topic spelled as
// Nomad's, `Topic:key`, or the X-Nomad-Token header) the lines are Nomad's
// frames (messages/nomad: nomad_event_frames), else berth's events, one
// per line (codec: event_json).
void event_stream_view(caf::actor_system& sys, const api_actor& api, const http_request& http,
                       http_stream& out) {
  auto refuse = [&](int status, json body) {
    out.start(status, "application/json");
    out.write(dump(body) + "\n");
  };
  auto number = [](const std::string& s) -> std::optional<uint64_t> {
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return std::stoull(s);
  };
  auto each_topic = [](const std::string& value, const auto& f) {
    size_t start = 0;
    while (start <= value.size()) {
      auto comma = value.find(',', start);
      auto t = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? value.size() + 1 : comma + 1;
      if (!t.empty() && !f(t)) return false;
    }
    return true;
  };
  bool nomad = http.nomad_token;
  if (auto t = http.query.find("topic"); t != http.query.end())
    each_topic(t->second, [&](const std::string& one) {
      nomad = nomad || nomad_event_topic_spelling(one);
      return true;
    });
  v1::EventStreamRequest req;
  std::optional<nomad_event_query> nomad_query;
  if (nomad) {
    auto t = http.query.find("topic");
    auto parsed = parse_nomad_event_topics(t == http.query.end() ? "" : t->second);
    if (!parsed.query) return refuse(400, {{"error", parsed.error}});
    nomad_query = std::move(*parsed.query);
    for (auto topic : nomad_query->berth_topics) req.add_topics(topic);
    // Only topics berth has none of: the journal's restores alone, which
    // the query drops unless it asked for Operator (heartbeats remain).
    if (nomad_query->nothing) req.add_topics(v1::EVENT_STATE);
    req.set_namespace_("default");  // Nomad's default; "*" is every namespace
  }
  uint64_t until = 0;
  for (const auto& [key, value] : http.query) {
    if (key == "index" || key == "until_index") {
      auto n = number(value);
      if (!n) return refuse(400, {{"error", key + " must be a log index (a number)"}});
      if (key == "index")
        req.set_index(*n);
      else
        until = *n;
    } else if (key == "namespace") {
      req.set_namespace_(nomad && value == "*" ? "" : value);
    } else if (key == "topic") {
      if (nomad) continue;
      bool ok = each_topic(value, [&](const std::string& t) {
        auto topic = parse_event_topic(t);
        if (!topic || *topic == v1::EVENT_STATE) {
          refuse(400, {{"error", "topic '" + t +
                                     "' is not a topic; the topics are volume, "
                                     "claim, alloc, node, plugin (or Nomad's: "
                                     "CSIVolume, CSIPlugin, Node, Allocation, *)"}});
          return false;
        }
        req.add_topics(*topic);
        return true;
      });
      if (!ok) return;
    } else if (nomad && (key == "region" || key == "stale")) {
      // Nomad's query options: berth is one region, and every server
      // answers from what it applied.
      if (auto e = nomad_read_problem({{key, value}}); !e.empty())
        return refuse(400, {{"error", e}});
    } else {
      return refuse(400, {{"error", "unknown parameter '" + key +
                                        "'; the parameters are index, topic, namespace, "
                                        "until_index, token"}});
    }
  }
  // Nomad's index 0 (the default) is the server's backlog, then what comes.
  if (nomad_query && req.index() == 0) req.set_index(1);
  const char* content_type = nomad_query ? "application/json" : "application/x-ndjson";
  auto lines_of = [&](const v1::Response& resp) {
    std::string lines;
    if (nomad_query) {
      std::vector<v1::Event> events;
      for (const auto& e : resp.events())
        if (until == 0 || e.index() <= until) events.push_back(e);
      for (const auto& frame : nomad_event_frames(events, *nomad_query))
        lines += frame.dump() + "\n";
      return lines;
    }
    for (const auto& e : resp.events()) {
      if (until != 0 && e.index() > until) break;
      lines += dump(event_json(e)) + "\n";
    }
    return lines;
  };
  caf::scoped_actor self{sys};
  bool started = false;
  for (;;) {
    if (until != 0 && req.index() > until) {
      if (!started) out.start(200, content_type);
      return;
    }
    // The first poll does not wait: the status line goes out at once.
    req.set_wait_ms(started ? 10'000 : 0);
    v1::Request r;
    *r.mutable_event_stream() = req;
    r.set_token(http.token);
    auto [resp, why] = poll_api(self, api, std::move(r));
    // Nomad's stream starts at the oldest index still kept when the one
    // asked for is gone; berth's answers 410 with it.
    if (nomad_query && resp && resp->journal_first_index() > req.index()) {
      req.set_index(resp->journal_first_index());
      continue;
    }
    if (!resp || resp->error().code() != v1::OK) {
      json body{{"error", why}};
      if (resp && resp->journal_first_index() != 0) body["first_index"] = resp->journal_first_index();
      if (!started) {
        int status = resp && resp->journal_first_index() != 0 ? 410
                     : resp && resp->error().code() == v1::FORBIDDEN ? 403
                                                                      : 503;
        return refuse(status, body);
      }
      out.write(dump(body) + "\n");
      return;
    }
    if (!started) out.start(200, content_type);
    std::string lines = lines_of(*resp);
    if (lines.empty() && started) lines = "{}\n";
    started = true;
    if (!out.write(lines)) return;
    req.set_index(std::max(req.index(), resp->next_index()));
  }
}

// GET /v1/agent/monitor (berth monitor; Nomad's path): this server's log
// lines, or those of a node's client through the leader (node_id), the
// newest `lines` first, then each as it is written.  plain=true: the lines
// as text (an empty line is a heartbeat after 10 s without one); else
// Nomad's frames {"Data": base64 of the lines}, `{}` the heartbeat.
void monitor_view(caf::actor_system& sys, const api_actor& api, const http_request& http,
                  http_stream& out) {
  auto refuse = [&](int status, const std::string& why) {
    out.start(status, "application/json");
    out.write(dump(json{{"error", why}}) + "\n");
  };
  v1::MonitorRequest m;
  m.set_level("info");
  m.set_tail(20);
  bool plain = false;
  for (const auto& [key, value] : http.query) {
    if (key == "log_level") {
      std::string level;
      for (char ch : value)
        level += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (level == "warning") level = "warn";
      if (level != "trace" && level != "debug" && level != "info" && level != "warn" &&
          level != "error")
        return refuse(400, "log_level must be trace, debug, info, warn or error");
      m.set_level(level);
    } else if (key == "node_id") {
      m.set_node_id(value);
    } else if (key == "lines") {
      if (value.empty() || value.size() > 4 ||
          value.find_first_not_of("0123456789") != std::string::npos || std::stoul(value) > 2048)
        return refuse(400, "lines must be a count from 0 to 2048");
      m.set_tail(static_cast<uint32_t>(std::stoul(value)));
    } else if (key == "plain") {
      if (value != "true" && value != "false") return refuse(400, "plain must be true or false");
      plain = value == "true";
    } else if (key == "region") {
      if (auto e = nomad_region_problem(value); !e.empty()) return refuse(400, e);
    } else if (key == "log_json") {
      // berthd's own --log-format decides the lines' form.
    } else {
      return refuse(400, "unknown parameter '" + key +
                             "'; the parameters are log_level, node_id, lines, plain, token");
    }
  }
  caf::scoped_actor self{sys};
  bool started = false;
  for (;;) {
    m.set_wait_ms(started ? 10'000 : 0);
    v1::Request r;
    *r.mutable_monitor() = m;
    r.set_token(http.token);
    auto [resp, why] = poll_api(self, api, std::move(r));
    if (!resp || resp->error().code() != v1::OK) {
      if (!started) return refuse(resp ? http_status_of(resp->error().code()) : 503, why);
      if (!plain) out.write(dump(json{{"error", why}}) + "\n");
      return;
    }
    if (!started) out.start(200, plain ? "text/plain; charset=utf-8" : "application/json");
    const auto& result = resp->monitor();
    std::string text;
    for (const auto& line : result.lines()) text += line + "\n";
    // With nothing new after a wait: a heartbeat (an empty line in text),
    // whose write notices a caller that went away.
    std::string chunk = !text.empty() ? (plain ? text : dump(json{{"Data", base64(text)}}) + "\n")
                        : started     ? std::string(plain ? "\n" : "{}\n")
                                      : std::string();
    started = true;
    if (!out.write(chunk)) return;
    // A restarted berthd numbers its lines from 1 again.
    m.set_after(result.last() < m.after() ? 0 : result.last());
    m.set_tail(std::numeric_limits<uint32_t>::max());
  }
}

}  // namespace berth
