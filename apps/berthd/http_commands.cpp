// The shell's commands over HTTP beyond the reads, the claim, the release,
// the detach, the alloc stop and the node drain (apps/berthd/http_api.cpp):
// each route builds the v1::Request the shell's command builds and shows
// the answer with the shell's --json renderer (messages/codec).  A retry is
// safe as the shell's is: the caller's ids (an alloc's id, a snapshot's
// name, a token's accessor id and secret) or ids made from the
// Idempotency-Key header name the same object again.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/clock.hpp"
#include "apps/berthd/http_route.hpp"
#include "control/snapshots.hpp"
#include "messages/codec.hpp"
#include "messages/ids.hpp"
#include "messages/model.hpp"
#include "messages/nomad.hpp"

namespace berth::http {

namespace {

using seconds = std::chrono::seconds;

// The strings of an array field (absent: none), or what is wrong.
std::variant<std::vector<std::string>, std::string> strings_of(const json& body, const char* key) {
  std::vector<std::string> out;
  if (!body.contains(key) || body[key].is_null()) return out;
  for (const auto& x : body[key]) {
    if (!x.is_string()) return std::string("field '") + key + "' must be an array of strings";
    out.push_back(x.get<std::string>());
  }
  return out;
}

// An object field of strings into a protobuf map, or what is wrong.
std::optional<std::string> map_of(const json& body, const char* key,
                                  google::protobuf::Map<std::string, std::string>* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  for (const auto& [k, v] : body[key].items()) {
    if (!v.is_string())
      return std::string("field '") + key + "' must map strings to strings ('" + k + "' does not)";
    (*out)[k] = v.get<std::string>();
  }
  return std::nullopt;
}

const param_doc id_body{"id", "body", "the volume's id", true};
const param_doc namespace_body{"namespace", "body", "the volume's namespace (default: default)"};
const param_doc spec_namespace{"namespace", "query",
                               "put the volume in this namespace (over the spec's)"};
const param_doc secrets_body{"secrets", "body", "secrets for the plugin (never shown or logged)",
                             false, "object"};

// A POST route whose request is built from the body.
route post(const char* path, const char* summary, std::vector<param_doc> docs,
           std::function<built(const params&, const json&, const http_request&)> build,
           renderer render, seconds timeout = seconds(60)) {
  route r{"POST", path, summary, std::move(docs), nullptr, std::move(render), timeout};
  r.build_body = std::move(build);
  return r;
}

// A GET route.
route get(const char* path, const char* summary, std::vector<param_doc> docs,
          std::function<built(const params&)> build, renderer render) {
  return route{"GET", path, summary, std::move(docs), std::move(build), std::move(render)};
}

json gone(const params& p, const char* what, const v1::Response& r) {
  return json{{"id", param(p, "id")},
              {"namespace", volume_namespace(p)},
              {what, true},
              {"message", r.message()}};
}

auto volume_with_message = [](const v1::Response& r) {
  return with_message(single_volume_json(r), r);
};

// The volume spec of a register or create body (the shell's spec file as
// JSON); ?namespace= puts it in another namespace, as --namespace does.
std::variant<v1::Volume, json_view> spec_of(const http_request& req, const params& p,
                                            spec_use use) {
  if (req.content_type != "application/json")
    return error_view(415,
                      "send the volume spec (berth volume init's, as JSON) with "
                      "Content-Type: application/json");
  auto parsed = parse_volume_spec(req.body, use);
  if (auto* problems = std::get_if<std::vector<problem>>(&parsed))
    return error_view(400, describe("the volume spec", *problems));
  auto v = std::get<v1::Volume>(std::move(parsed));
  if (!param(p, "namespace").empty()) v.set_namespace_(param(p, "namespace"));
  return v;
}

// A create of the spec's volume (count 0) or of its members ID[0] ..
// ID[count-1], each looked up first: one that exists with the same plugin
// is answered as it is (so a retry after a lost answer makes only the
// rest), one with another plugin is refused.
json_view create_volumes(const caller& c, const v1::Volume& base, uint32_t count) {
  json members = json::array();
  std::string made;
  auto done_so_far = [&] { return made.empty() ? "" : " (made before it:" + made + ")"; };
  for (uint32_t i = 0; i < std::max<uint32_t>(count, 1); ++i) {
    auto v = base;
    if (count > 0) {
      v.set_id(member_id(base.id(), static_cast<int>(i)));
      v.clear_name();  // the id's (apply_defaults)
    }
    v1::Request status;
    status.mutable_volume_status()->set_namespace_(v.namespace_());
    status.mutable_volume_status()->set_id(v.id());
    auto known = c.ask(status);
    if (auto* r = std::get_if<v1::Response>(&known); r && r->volumes_size() > 0) {
      if (r->volumes(0).plugin_id() != v.plugin_id())
        return error_view(409, "volume '" + v.id() + "' exists already with plugin '" +
                                   r->volumes(0).plugin_id() + "'; choose another id for the spec" +
                                   done_so_far());
      auto j = single_volume_json(*r);
      j["message"] = "volume '" + v.id() + "' exists already; not created again";
      members.push_back(std::move(j));
      continue;
    }
    v1::Request req;
    *req.mutable_volume_create() = v;
    auto got = c.ask(req);
    if (auto* refused = std::get_if<json_view>(&got)) {
      auto why = json::parse(refused->body, nullptr, false);
      auto message = why.is_object() && why.contains("error") && why["error"].is_string()
                         ? why["error"].get<std::string>()
                         : std::string("no answer");
      return error_view(refused->status, message + done_so_far());
    }
    members.push_back(volume_with_message(std::get<v1::Response>(got)));
    made += " " + v.id();
  }
  return json_view{200, dump(count > 0 ? members : members[0])};
}

void add_volume_routes(std::vector<route>& v) {
  route reg{"POST",
            "/v1/volume/register",
            "berth volume register SPEC: the body is the volume spec (berth volume init's, as "
            "JSON); registering the same spec again changes nothing",
            {spec_namespace},
            nullptr,
            nullptr,
            seconds(60)};
  reg.raw_body = true;
  reg.exec = [](const caller& c, const params& p, const json&, const http_request& req) {
    auto spec = spec_of(req, p, spec_use::registration);
    if (auto* refused = std::get_if<json_view>(&spec)) return *refused;
    v1::Request r;
    *r.mutable_volume_register() = std::get<v1::Volume>(std::move(spec));
    auto got = c.ask(std::move(r));
    if (auto* refused = std::get_if<json_view>(&got)) return *refused;
    return json_view{200, dump(volume_with_message(std::get<v1::Response>(got)))};
  };
  route create = reg;
  create.path = "/v1/volume/create";
  create.summary =
      "berth volume create SPEC [--count N]: the body is the volume spec (as JSON); the plugin "
      "makes the volume (CreateVolume). A volume that exists already with the same plugin is "
      "answered as it is, so a retry is safe; ?count=N makes ID[0] .. ID[N-1] and answers them "
      "all";
  create.docs = {spec_namespace,
                 {"count", "query", "make N volumes ID[0] .. ID[N-1] from the one spec"}};
  create.timeout = seconds(120);
  create.exec = [](const caller& c, const params& p, const json&, const http_request& req) {
    uint32_t count = 0;
    if (auto n = param(p, "count"); !n.empty()) {
      if (n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(n) < 1 || std::stoul(n) > max_group_count)
        return error_view(400, "count '" + n.substr(0, 20) + "' is not a number from 1 to " +
                                   std::to_string(max_group_count));
      count = static_cast<uint32_t>(std::stoul(n));
    }
    auto spec = spec_of(req, p, spec_use::create);
    if (auto* refused = std::get_if<json_view>(&spec)) return *refused;
    return create_volumes(c, std::get<v1::Volume>(spec), count);
  };
  v.push_back(std::move(reg));
  v.push_back(std::move(create));

  v.push_back(post(
      "/v1/volume/deregister",
      "berth volume deregister ID [--force]: remove it from berth (refused while claimed; "
      "force releases the claims first); the storage stays",
      {id_body, namespace_body, {"force", "body", "release every claim first", false, "boolean"}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"id"}); !m.empty()) return m;
        v1::Request r;
        auto* d = r.mutable_volume_deregister();
        d->set_namespace_(volume_namespace(p));
        d->set_volume_id(param(p, "id"));
        d->set_force(flag(p, "force"));
        return r;
      },
      [](const v1::Response& r, const params& p) {
        return answer{dump(gone(p, "deregistered", r))};
      }));
  v.push_back(post(
      "/v1/volume/delete",
      "berth volume delete ID: delete it through its plugin (DeleteVolume) and deregister it",
      {id_body, namespace_body},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"id"}); !m.empty()) return m;
        v1::Request r;
        r.mutable_volume_delete()->set_namespace_(volume_namespace(p));
        r.mutable_volume_delete()->set_volume_id(param(p, "id"));
        return r;
      },
      [](const v1::Response& r, const params& p) { return answer{dump(gone(p, "deleted", r))}; },
      seconds(120)));
  v.push_back(post(
      "/v1/volume/expand",
      "berth volume expand ID SIZE: grow it (ControllerExpandVolume, then NodeExpandVolume "
      "where it is published); the same size again changes nothing",
      {id_body,
       namespace_body,
       {"size", "body", "the new size: bytes, or with KiB, MiB, GiB, TiB (2GiB)", true}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"id", "size"}); !m.empty()) return m;
        auto size = parse_size(param(p, "size"));
        if (!size || *size <= 0)
          return "size '" + param(p, "size").substr(0, 40) +
                 "' is not a size; give bytes (1073741824) or a number with a unit (2GiB, "
                 "500MiB)";
        v1::Request r;
        auto* e = r.mutable_volume_expand();
        e->set_namespace_(volume_namespace(p));
        e->set_volume_id(param(p, "id"));
        e->set_required_bytes(*size);
        return r;
      },
      as_json(volume_with_message), seconds(120)));
  v.push_back(post(
      "/v1/volume/modify",
      "berth volume modify ID --parameter K=V: change its mutable parameters through its "
      "plugin (ControllerModifyVolume)",
      {id_body,
       namespace_body,
       {"parameters", "body", "the mutable parameters", true, "object"},
       secrets_body},
      [](const params& p, const json& body, const http_request&) -> built {
        if (auto m = missing(p, {"id"}); !m.empty()) return m;
        v1::Request r;
        auto* m = r.mutable_volume_modify();
        m->set_namespace_(volume_namespace(p));
        m->set_volume_id(param(p, "id"));
        if (auto e = map_of(body, "parameters", m->mutable_parameters())) return *e;
        if (m->parameters().empty()) return std::string("field 'parameters' names no parameter");
        if (auto e = map_of(body, "secrets", m->mutable_secrets())) return *e;
        return r;
      },
      as_json(volume_with_message), seconds(120)));
  v.push_back(post(
      "/v1/volume/availability",
      "berth volume availability ID active|pause|drain: whether it takes claims",
      {id_body, namespace_body, {"availability", "body", "active, pause or drain", true}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"id", "availability"}); !m.empty()) return m;
        auto a = parse_volume_availability(param(p, "availability"));
        if (!a)
          return "availability '" + param(p, "availability").substr(0, 40) + "' is not one of " +
                 volume_availability_names();
        v1::Request r;
        auto* x = r.mutable_volume_availability();
        x->set_namespace_(volume_namespace(p));
        x->set_volume_id(param(p, "id"));
        x->set_availability(*a);
        return r;
      },
      as_json(volume_with_message)));
}

void add_snapshot_routes(std::vector<route>& v) {
  v.push_back(post(
      "/v1/volume/snapshot/create",
      "berth volume snapshot create VOLUME [NAME] | --group NAME VOLUME...: take a snapshot "
      "(CreateSnapshot) or one group snapshot (CreateVolumeGroupSnapshot). Without a name, one "
      "made from the Idempotency-Key header (a retry finds the snapshot the first took), else "
      "a new one",
      {{"volume", "body", "the volume (not with group)"},
       {"name", "body", "the snapshot's CSI name"},
       {"group", "body", "take one group snapshot of `volumes` with this name"},
       {"volumes", "body", "with group: the volumes", false, "array"},
       namespace_body,
       {"parameters", "body", "for the plugin", false, "object"},
       secrets_body},
      [](const params& p, const json& body, const http_request& req) -> built {
        v1::Request r;
        auto* c = r.mutable_snapshot_create();
        c->set_namespace_(volume_namespace(p));
        auto volumes = strings_of(body, "volumes");
        if (auto* e = std::get_if<std::string>(&volumes)) return *e;
        if (!param(p, "group").empty()) {
          if (!param(p, "volume").empty() || !param(p, "name").empty())
            return std::string("with group, name the volumes in 'volumes' (not 'volume', 'name')");
          auto& all = std::get<std::vector<std::string>>(volumes);
          if (all.empty()) return std::string("a group snapshot needs 'volumes'");
          c->set_name(param(p, "group"));
          for (const auto& x : all) c->add_volume_ids(x);
        } else {
          if (!std::get<std::vector<std::string>>(volumes).empty())
            return std::string("'volumes' is for a group snapshot: give 'group' too, or 'volume'");
          if (auto m = missing(p, {"volume"}); !m.empty()) return m;
          c->set_volume_id(param(p, "volume"));
          auto name = param(p, "name");
          if (name.empty())
            name = req.idempotency_key.empty()
                       ? generated_snapshot_name(c->namespace_(), c->volume_id(), wall_ms())
                       : "berth-" + c->namespace_() + "-" + c->volume_id() + "-" +
                             id_of_key(req.idempotency_key);
          c->set_name(name);
        }
        if (auto e = map_of(body, "parameters", c->mutable_parameters())) return *e;
        if (auto e = map_of(body, "secrets", c->mutable_secrets())) return *e;
        return r;
      },
      [](const v1::Response& r, const params& p) {
        if (!param(p, "group").empty()) return answer{dump(snapshots_json(r))};
        return answer{dump(r.snapshots().empty() ? json() : snapshot_json(r.snapshots(0)))};
      },
      seconds(120)));
  v.push_back(post(
      "/v1/volume/snapshot/delete",
      "berth volume snapshot delete PLUGIN SNAPSHOT | --group GROUP: delete a snapshot "
      "(DeleteSnapshot) or a group snapshot with its members; one that is gone already is "
      "success",
      {{"plugin", "body", "the snapshot's plugin", true},
       {"snapshot_id", "body", "the snapshot (not with group)"},
       {"group", "body", "the group snapshot to delete with its members"},
       {"members", "body", "with group: the members' ids (default: as the plugin lists them)",
        false, "array"},
       secrets_body},
      [](const params& p, const json& body, const http_request&) -> built {
        if (auto m = missing(p, {"plugin"}); !m.empty()) return m;
        if (param(p, "snapshot_id").empty() == param(p, "group").empty())
          return std::string("give one of 'snapshot_id' and 'group'");
        auto members = strings_of(body, "members");
        if (auto* e = std::get_if<std::string>(&members)) return *e;
        v1::Request r;
        auto* d = r.mutable_snapshot_delete();
        d->set_plugin_id(param(p, "plugin"));
        d->set_snapshot_id(param(p, "snapshot_id"));
        d->set_group_snapshot_id(param(p, "group"));
        for (const auto& m : std::get<std::vector<std::string>>(members)) d->add_snapshot_ids(m);
        if (auto e = map_of(body, "secrets", d->mutable_secrets())) return *e;
        return r;
      },
      as_json([](const v1::Response& r) {
        return json{{"message", r.message()}};
      })));
  route list = get(
      "/v1/volume/snapshots",
      "berth volume snapshot list: the snapshots of a plugin, or of every plugin that can list "
      "them (ListSnapshots); secrets in the X-Nomad-CSI-Secrets header",
      {{"plugin", "query", "only this plugin's"},
       {"per_page", "query", "at most this many (with plugin; next_page_token names the next)"},
       {"page_token", "query", "start at this page"}},
      nullptr, [](const v1::Response& r, const params&) {
        return answer{
            dump(json{{"snapshots", snapshots_json(r)}, {"next_page_token", r.next_page_token()}})};
      });
  list.timeout = seconds(60);
  list.batch = [](const params& p,
                  const http_request& h) -> std::variant<std::vector<v1::Request>, std::string> {
    v1::Request r;
    auto* q = r.mutable_snapshot_list();
    q->set_plugin_id(param(p, "plugin"));
    q->set_page_token(param(p, "page_token"));
    if (auto n = param(p, "per_page"); !n.empty()) {
      if (n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos)
        return "per_page '" + n.substr(0, 20) + "' is not a number";
      q->set_per_page(static_cast<uint32_t>(std::stoul(n)));
    }
    auto secrets = parse_csi_secrets(h.csi_secrets);
    if (auto* e = std::get_if<std::string>(&secrets)) return *e;
    for (auto& [k, x] : std::get<std::map<std::string, std::string>>(secrets))
      (*q->mutable_secrets())[k] = x;
    return std::vector<v1::Request>{r};
  };
  list.render_batch = [](const std::vector<v1::Response>& all) {
    return answer{dump(json{{"snapshots", snapshots_json(all.at(0))},
                            {"next_page_token", all.at(0).next_page_token()}})};
  };
  v.push_back(std::move(list));
}

void add_alloc_and_node_routes(std::vector<route>& v) {
  v.push_back(post(
      "/v1/alloc/run",
      "berth alloc run: claim each volume on a node (placed by the leader without `node`) and "
      "run the command there. The alloc's id is `id`, else one made from the Idempotency-Key "
      "header (a retry answers the alloc the first made), else a new one",
      {{"node", "body", "the node (default: placed by the leader)"},
       {"id", "body", "the alloc's id"},
       {"volumes", "body", "NAME=VOLUME[:ro][,mount_flag=FLAG]... each", false, "array"},
       {"command", "body", "the command and its arguments (none: runs until stopped)", false,
        "array"},
       {"namespace", "body", "the volumes' namespace (default: default)"},
       {"group", "body", "run `count` allocs GROUP[0] .. GROUP[count-1]"},
       {"count", "body", "with group: how many (default 1)", false, "integer"},
       {"per_alloc", "body", "with group: GROUP[i] claims VOLUME[i]", false, "boolean"},
       {"explain", "body", "only say where it would be placed and why (without node)", false,
        "boolean"},
       {"allow_abnormal", "body", "claim volumes their plugin reports abnormal", false, "boolean"}},
      [](const params& p, const json& body, const http_request& req) -> built {
        v1::Request r;
        auto* a = r.mutable_alloc_run();
        a->set_namespace_(volume_namespace(p));
        a->set_node_id(param(p, "node"));
        a->set_allow_abnormal(flag(p, "allow_abnormal"));
        a->set_explain(flag(p, "explain"));
        if (a->explain() && !a->node_id().empty())
          return std::string(
              "explain shows where the leader would place the alloc: leave out "
              "node");
        auto group = param(p, "group");
        auto count_text = param(p, "count");
        if (count_text.size() > 4 ||
            count_text.find_first_not_of("0123456789") != std::string::npos)
          return "count '" + count_text.substr(0, 20) + "' is not a number";
        int64_t count = count_text.empty() ? 0 : std::stoll(count_text);
        if (!group.empty() || count != 0 || flag(p, "per_alloc")) {
          if (!param(p, "id").empty())
            return std::string(
                "id is not taken with group: the allocs are GROUP[0], GROUP[1], ...");
          if (group.empty()) return std::string("count and per_alloc need group");
          if (count < 0 || count > max_group_count)
            return "count must be from 1 to " + std::to_string(max_group_count);
          a->set_group(group);
          a->set_count(count > 0 ? static_cast<uint32_t>(count) : 1);
          a->set_per_alloc(flag(p, "per_alloc"));
        } else {
          a->set_id(!param(p, "id").empty()        ? param(p, "id")
                    : !req.idempotency_key.empty() ? id_of_key(req.idempotency_key)
                                                   : random_alloc_id());
        }
        auto volumes = strings_of(body, "volumes");
        if (auto* e = std::get_if<std::string>(&volumes)) return *e;
        for (const auto& arg : std::get<std::vector<std::string>>(volumes)) {
          auto av = parse_alloc_volume(arg);
          if (auto* e = std::get_if<std::string>(&av)) return *e;
          *a->add_volumes() = std::get<v1::AllocVolume>(av);
        }
        auto command = strings_of(body, "command");
        if (auto* e = std::get_if<std::string>(&command)) return *e;
        for (const auto& x : std::get<std::vector<std::string>>(command)) a->add_command(x);
        return r;
      },
      [](const v1::Response& r, const params& p) {
        if (flag(p, "explain")) return answer{dump(placement_json(r))};
        if (!param(p, "group").empty()) {
          json all = json::array();
          for (const auto& a : r.allocs()) all.push_back(alloc_json(a));
          return answer{dump(json{{"allocs", all}, {"message", r.message()}})};
        }
        return answer{dump(with_message(r.allocs().empty() ? json() : alloc_json(r.allocs(0)), r))};
      },
      seconds(120)));
  v.push_back(post(
      "/v1/node/eligibility",
      "berth node eligibility ID --enable|--disable: whether the node takes new allocs and "
      "claims",
      {{"id", "body", "the node", true},
       {"eligible", "body", "true: it takes them; false: it does not", true, "boolean"}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"id", "eligible"}); !m.empty()) return m;
        v1::Request r;
        r.mutable_node_eligibility()->set_node_id(param(p, "id"));
        r.mutable_node_eligibility()->set_eligible(flag(p, "eligible"));
        return r;
      },
      as_json(node_message_json), seconds(30)));
  v.push_back(post(
      "/v1/plugin/fingerprint",
      "berth plugin fingerprint ID --node N: report a plugin instance on a node by hand (what a "
      "client's CSI fingerprint does), or remove it",
      {{"id", "body", "the plugin", true},
       {"node", "body", "the node that runs the instance", true},
       {"type", "body", "node, controller or monolith (default)"},
       {"healthy", "body", "the instance is healthy (default true)", false, "boolean"},
       {"health_description", "body", "why it is (un)healthy"},
       {"remove", "body", "remove the instance instead", false, "boolean"},
       {"provider", "body", "the plugin's name (GetPluginInfo)"},
       {"provider_version", "body", "the plugin's version"},
       {"csi_node_id", "body", "the node id the plugin reports (default: node)"},
       {"controller_publish", "body", "the controller advertises PUBLISH_UNPUBLISH_VOLUME", false,
        "boolean"},
       {"stage_unstage", "body", "the node advertises STAGE_UNSTAGE_VOLUME", false, "boolean"},
       {"max_volumes", "body", "max volumes per node (0: unlimited)", false, "integer"}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"id", "node"}); !m.empty()) return m;
        auto type = parse_plugin_type(param(p, "type").empty() ? "monolith" : param(p, "type"));
        if (!type || *type == v1::PLUGIN_TYPE_UNKNOWN)
          return std::string("type must be node, controller or monolith");
        int64_t max_volumes = 0;
        if (auto n = param(p, "max_volumes"); !n.empty()) {
          if (n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos)
            return std::string("max_volumes must be a count (0: unlimited)");
          max_volumes = std::stoll(n);
        }
        v1::Request r;
        auto* f = r.mutable_plugin_fingerprint();
        f->set_plugin_id(param(p, "id"));
        f->set_node_id(param(p, "node"));
        f->set_type(*type);
        f->set_remove(flag(p, "remove"));
        auto* i = f->mutable_instance();
        i->set_healthy(param(p, "healthy").empty() || flag(p, "healthy"));
        i->set_health_description(param(p, "health_description"));
        i->set_provider(param(p, "provider"));
        i->set_provider_version(param(p, "provider_version"));
        i->set_csi_node_id(param(p, "csi_node_id").empty() ? param(p, "node")
                                                           : param(p, "csi_node_id"));
        i->set_publish_unpublish(flag(p, "controller_publish"));
        i->set_stage_unstage(flag(p, "stage_unstage"));
        i->set_max_volumes(max_volumes);
        return r;
      },
      as_json([](const v1::Response& r) {
        json out{{"message", r.message()}};
        if (!r.plugins().empty()) out["plugin"] = plugin_json(r.plugins(0));
        return out;
      }),
      seconds(30)));
}

auto message_only = [](const v1::Response& r) { return json{{"message", r.message()}}; };

void add_acl_routes(std::vector<route>& v) {
  auto token_answer = [](const v1::Response& r) {
    return r.acl_tokens().empty() ? json() : token_json(r.acl_tokens(0), r.acl_secret());
  };
  // A token's ids: the caller's (both, so that a retry finds the token),
  // else new ones; an Idempotency-Key alone cannot make a secret.
  auto ids = [](const params& p, const http_request& req,
                v1::AclRequest* a) -> std::optional<std::string> {
    auto accessor = param(p, "accessor_id"), secret = param(p, "secret_id");
    if (accessor.empty() != secret.empty())
      return std::string("give both accessor_id and secret_id, or neither");
    if (accessor.empty() && !req.idempotency_key.empty())
      return std::string(
          "a retry-safe token needs its own ids: give accessor_id and secret_id (two UUIDs you "
          "make; the key cannot make a secret)");
    a->set_accessor_id(accessor.empty() ? random_uuid() : accessor);
    a->set_secret(secret.empty() ? random_uuid() : secret);
    return std::nullopt;
  };
  const param_doc accessor_doc{"accessor_id", "body",
                               "the token's accessor id (a UUID; default: a new one)"};
  const param_doc secret_doc{"secret_id", "body",
                             "the token's secret (a UUID; default: a new one, answered once)"};
  v.push_back(post(
      "/v1/acl/bootstrap",
      "berth acl bootstrap: the first management token (answered with its secret_id, once)",
      {accessor_doc, secret_doc},
      [ids](const params& p, const json&, const http_request& req) -> built {
        v1::Request r;
        if (auto e = ids(p, req, r.mutable_acl_bootstrap())) return *e;
        return r;
      },
      as_json(token_answer), seconds(30)));
  v.push_back(get(
      "/v1/acl/policies", "berth acl policy list", {},
      [](const params&) -> built {
        v1::Request r;
        r.set_acl_policy_list(true);
        return r;
      },
      as_json([](const v1::Response& r) {
        json out = json::array();
        for (const auto& x : r.acl_policies()) out.push_back(policy_json(x, false));
        return out;
      })));
  v.push_back(get(
      "/v1/acl/policy", "berth acl policy info NAME: the policy with its rules",
      {{"name", "query", "the policy", true}},
      [](const params& p) -> built {
        if (auto m = missing(p, {"name"}); !m.empty()) return m;
        v1::Request r;
        r.set_acl_policy_info(param(p, "name"));
        return r;
      },
      as_json([](const v1::Response& r) {
        return r.acl_policies().empty() ? json() : policy_json(r.acl_policies(0), true);
      })));
  v.push_back(post(
      "/v1/acl/policy",
      "berth acl policy apply NAME FILE: create or update a policy (rules in Nomad's HCL form)",
      {{"name", "body", "the policy", true},
       {"rules", "body", "the policy document", true},
       {"description", "body", "what it is for"}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"name", "rules"}); !m.empty()) return m;
        v1::Request r;
        auto* a = r.mutable_acl_policy_apply();
        a->set_name(param(p, "name"));
        a->set_rules(param(p, "rules"));
        a->set_description(param(p, "description"));
        return r;
      },
      as_json(message_only), seconds(30)));
  v.push_back(post(
      "/v1/acl/policy/delete", "berth acl policy delete NAME",
      {{"name", "body", "the policy", true}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"name"}); !m.empty()) return m;
        v1::Request r;
        r.set_acl_policy_delete(param(p, "name"));
        return r;
      },
      as_json(message_only), seconds(30)));
  v.push_back(post(
      "/v1/acl/token",
      "berth acl token create: a token carrying policies (answered with its secret_id, once)",
      {{"name", "body", "a label"},
       {"policies", "body", "the policies it carries", false, "array"},
       {"type", "body", "client (default: its policies) or management (everything)"},
       accessor_doc,
       secret_doc},
      [ids](const params& p, const json& body, const http_request& req) -> built {
        v1::Request r;
        auto* a = r.mutable_acl_token_create();
        if (auto e = ids(p, req, a)) return *e;
        a->set_name(param(p, "name"));
        a->set_type(param(p, "type").empty() ? "client" : param(p, "type"));
        auto policies = strings_of(body, "policies");
        if (auto* e = std::get_if<std::string>(&policies)) return *e;
        for (const auto& x : std::get<std::vector<std::string>>(policies)) a->add_policies(x);
        return r;
      },
      as_json(token_answer), seconds(30)));
  v.push_back(get(
      "/v1/acl/tokens", "berth acl token list (never their secrets)", {},
      [](const params&) -> built {
        v1::Request r;
        r.set_acl_token_list(true);
        return r;
      },
      as_json([](const v1::Response& r) {
        json out = json::array();
        for (const auto& t : r.acl_tokens()) out.push_back(token_json(t, ""));
        return out;
      })));
  v.push_back(get(
      "/v1/acl/token", "berth acl token info ACCESSOR",
      {{"id", "query", "the token's accessor id", true}},
      [](const params& p) -> built {
        if (auto m = missing(p, {"id"}); !m.empty()) return m;
        v1::Request r;
        r.set_acl_token_info(param(p, "id"));
        return r;
      },
      as_json([](const v1::Response& r) {
        return r.acl_tokens().empty() ? json() : token_json(r.acl_tokens(0), "");
      })));
  v.push_back(get(
      "/v1/acl/token/self", "berth acl token self: the caller's token", {},
      [](const params&) -> built {
        v1::Request r;
        r.set_acl_token_self(true);
        return r;
      },
      as_json([](const v1::Response& r) {
        return r.acl_tokens().empty() ? json() : token_json(r.acl_tokens(0), "");
      })));
  v.push_back(post(
      "/v1/acl/token/delete", "berth acl token delete ACCESSOR: refused at once on every server",
      {{"id", "body", "the token's accessor id", true}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"id"}); !m.empty()) return m;
        v1::Request r;
        r.set_acl_token_delete(param(p, "id"));
        return r;
      },
      as_json(message_only), seconds(30)));
}

void add_operator_routes(std::vector<route>& v) {
  route save = get(
      "/v1/operator/snapshot",
      "berth operator snapshot save: a consistent copy of the cluster's state (the bytes, "
      "application/octet-stream; X-Berth-Snapshot-Index names its index)",
      {},
      [](const params&) -> built {
        v1::Request r;
        r.set_snapshot_save(true);
        return r;
      },
      [](const v1::Response& r, const params&) {
        return answer{r.snapshot(),
                      {{"X-Berth-Snapshot-Index", std::to_string(r.snapshot_index())}},
                      "application/octet-stream"};
      });
  save.timeout = seconds(300);
  v.push_back(std::move(save));
  route restore{"PUT",
                "/v1/operator/snapshot",
                "berth operator snapshot restore: replace the cluster's state with the body (the "
                "bytes of a saved snapshot, up to 1 GiB; every server applies it as one "
                "committed change)",
                {},
                nullptr,
                nullptr,
                seconds(300)};
  restore.raw_body = true;
  restore.exec = [](const caller& c, const params&, const json&, const http_request& req) {
    if (req.body.empty())
      return error_view(400,
                        "the body is empty: send the bytes of a snapshot (curl "
                        "--data-binary @FILE)");
    v1::Request r;
    r.set_snapshot_restore(req.body);
    auto got = c.ask(std::move(r));
    if (auto* refused = std::get_if<json_view>(&got)) return *refused;
    const auto& resp = std::get<v1::Response>(got);
    return json_view{200,
                     dump(json{{"index", resp.snapshot_index()}, {"message", resp.message()}})};
  };
  v.push_back(std::move(restore));
  v.push_back(post(
      "/v1/raft/remove-peer", "berth operator raft remove-peer NAME: take a server out of Raft",
      {{"name", "body", "the server's name", true}},
      [](const params& p, const json&, const http_request&) -> built {
        if (auto m = missing(p, {"name"}); !m.empty()) return m;
        v1::Request r;
        r.set_raft_remove_peer(param(p, "name"));
        return r;
      },
      as_json(message_only), seconds(30)));
  v.push_back(post(
      "/v1/raft/transfer-leadership",
      "berth operator raft transfer-leadership [NAME]: hand the lead to a server (default: any "
      "other)",
      {{"name", "body", "the server's name (default: any other)"}},
      [](const params& p, const json&, const http_request&) -> built {
        v1::Request r;
        r.set_raft_transfer_leadership(param(p, "name"));
        return r;
      },
      as_json(message_only), seconds(30)));
  auto gc = post(
      "/v1/system/gc",
      "berth system gc: collect terminal allocs without claims and empty down nodes now (safe "
      "to repeat)",
      {},
      [](const params&, const json&, const http_request&) -> built {
        v1::Request r;
        r.set_system_gc(true);
        return r;
      },
      as_json(message_only));
  v.push_back(gc);
  gc.method = "PUT";  // Nomad's PUT /v1/system/gc
  gc.summary = "Nomad: PUT /v1/system/gc, as POST";
  v.push_back(std::move(gc));
}

}  // namespace

void add_shell_commands(std::vector<route>& v) {
  add_volume_routes(v);
  add_snapshot_routes(v);
  add_alloc_and_node_routes(v);
  add_acl_routes(v);
  add_operator_routes(v);
}

}  // namespace berth::http
