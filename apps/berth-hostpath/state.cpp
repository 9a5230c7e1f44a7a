#include "state.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "persistence/durable_file.hpp"

namespace berth::hostpath {

using json = nlohmann::json;

void to_json(json& j, const attachment& a) {
  j = json{{"access_mode", a.access_mode}, {"readonly", a.readonly}};
}
void from_json(const json& j, attachment& a) {
  j.at("access_mode").get_to(a.access_mode);
  j.at("readonly").get_to(a.readonly);
}
// The fields added after the first version are written only when set and
// read when present, so the files of either version load in the other.
void to_json(json& j, const volume_record& v) {
  j = json{{"name", v.name}, {"capacity_bytes", v.capacity_bytes}, {"parameters", v.parameters}};
  if (!v.mutable_parameters.empty())
    j["mutable_parameters"] = v.mutable_parameters;
  if (!v.source_snapshot_id.empty())
    j["source_snapshot_id"] = v.source_snapshot_id;
  if (!v.source_volume_id.empty())
    j["source_volume_id"] = v.source_volume_id;
}
void from_json(const json& j, volume_record& v) {
  j.at("name").get_to(v.name);
  j.at("capacity_bytes").get_to(v.capacity_bytes);
  j.at("parameters").get_to(v.parameters);
  if (j.contains("mutable_parameters"))
    j.at("mutable_parameters").get_to(v.mutable_parameters);
  if (j.contains("source_snapshot_id"))
    j.at("source_snapshot_id").get_to(v.source_snapshot_id);
  if (j.contains("source_volume_id"))
    j.at("source_volume_id").get_to(v.source_volume_id);
}
void to_json(json& j, const snapshot_record& s) {
  j = json{{"name", s.name},
           {"source_volume_id", s.source_volume_id},
           {"parameters", s.parameters},
           {"size_bytes", s.size_bytes},
           {"creation_time_ns", s.creation_time_ns}};
  if (!s.group_snapshot_id.empty())
    j["group_snapshot_id"] = s.group_snapshot_id;
}
void from_json(const json& j, snapshot_record& s) {
  j.at("name").get_to(s.name);
  j.at("source_volume_id").get_to(s.source_volume_id);
  j.at("parameters").get_to(s.parameters);
  j.at("size_bytes").get_to(s.size_bytes);
  j.at("creation_time_ns").get_to(s.creation_time_ns);
  if (j.contains("group_snapshot_id"))
    j.at("group_snapshot_id").get_to(s.group_snapshot_id);
}
void to_json(json& j, const group_snapshot_record& g) {
  j = json{{"name", g.name},
           {"source_volume_ids", g.source_volume_ids},
           {"snapshot_ids", g.snapshot_ids},
           {"parameters", g.parameters},
           {"creation_time_ns", g.creation_time_ns}};
}
void from_json(const json& j, group_snapshot_record& g) {
  j.at("name").get_to(g.name);
  j.at("source_volume_ids").get_to(g.source_volume_ids);
  j.at("snapshot_ids").get_to(g.snapshot_ids);
  j.at("parameters").get_to(g.parameters);
  j.at("creation_time_ns").get_to(g.creation_time_ns);
}
void to_json(json& j, const staging_record& s) {
  j = json{{"volume_id", s.volume_id}, {"how", s.how}};
}
void from_json(const json& j, staging_record& s) {
  j.at("volume_id").get_to(s.volume_id);
  j.at("how").get_to(s.how);
}
void to_json(json& j, const publication_record& p) {
  j = json{{"volume_id", p.volume_id},
           {"staging_target_path", p.staging_target_path},
           {"how", p.how}};
}
void from_json(const json& j, publication_record& p) {
  j.at("volume_id").get_to(p.volume_id);
  j.at("staging_target_path").get_to(p.staging_target_path);
  j.at("how").get_to(p.how);
}

namespace {

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

json record_json(const record& r) {
  return std::visit(
      overloaded{
          [](const put_volume& x) {
            return json{{"op", "put_volume"}, {"id", x.id}, {"value", x.value}};
          },
          [](const erase_volume& x) { return json{{"op", "erase_volume"}, {"id", x.id}}; },
          [](const put_controller_publication& x) {
            return json{{"op", "put_controller_publication"},
                        {"volume_id", x.volume_id},
                        {"node_id", x.node_id},
                        {"value", x.value}};
          },
          [](const erase_controller_publication& x) {
            return json{{"op", "erase_controller_publication"},
                        {"volume_id", x.volume_id},
                        {"node_id", x.node_id}};
          },
          [](const put_staging& x) {
            return json{{"op", "put_staging"}, {"path", x.path}, {"value", x.value}};
          },
          [](const erase_staging& x) { return json{{"op", "erase_staging"}, {"path", x.path}}; },
          [](const put_publication& x) {
            return json{{"op", "put_publication"}, {"target", x.target}, {"value", x.value}};
          },
          [](const erase_publication& x) {
            return json{{"op", "erase_publication"}, {"target", x.target}};
          },
          [](const put_snapshot& x) {
            return json{{"op", "put_snapshot"}, {"id", x.id}, {"value", x.value}};
          },
          [](const erase_snapshot& x) { return json{{"op", "erase_snapshot"}, {"id", x.id}}; },
          [](const put_group_snapshot& x) {
            return json{{"op", "put_group_snapshot"}, {"id", x.id}, {"value", x.value}};
          },
          [](const erase_group_snapshot& x) {
            return json{{"op", "erase_group_snapshot"}, {"id", x.id}};
          },
      },
      r);
}

record json_record(const json& j) {
  auto op = j.at("op").get<std::string>();
  if (op == "put_volume")
    return put_volume{j.at("id").get<std::string>(), j.at("value").get<volume_record>()};
  if (op == "erase_volume")
    return erase_volume{j.at("id").get<std::string>()};
  if (op == "put_controller_publication")
    return put_controller_publication{j.at("volume_id").get<std::string>(),
                                      j.at("node_id").get<std::string>(),
                                      j.at("value").get<attachment>()};
  if (op == "erase_controller_publication")
    return erase_controller_publication{j.at("volume_id").get<std::string>(),
                                         j.at("node_id").get<std::string>()};
  if (op == "put_staging")
    return put_staging{j.at("path").get<std::string>(), j.at("value").get<staging_record>()};
  if (op == "erase_staging")
    return erase_staging{j.at("path").get<std::string>()};
  if (op == "put_publication")
    return put_publication{j.at("target").get<std::string>(),
                           j.at("value").get<publication_record>()};
  if (op == "erase_publication")
    return erase_publication{j.at("target").get<std::string>()};
  if (op == "put_snapshot")
    return put_snapshot{j.at("id").get<std::string>(), j.at("value").get<snapshot_record>()};
  if (op == "erase_snapshot")
    return erase_snapshot{j.at("id").get<std::string>()};
  if (op == "put_group_snapshot")
    return put_group_snapshot{j.at("id").get<std::string>(),
                              j.at("value").get<group_snapshot_record>()};
  if (op == "erase_group_snapshot")
    return erase_group_snapshot{j.at("id").get<std::string>()};
  throw std::runtime_error("unknown record op '" + op + "'");
}

// The records turning map `from` into map `to`, one put per key added or
// changed and one delete per key removed.
template <class Map, class Put, class Del>
void diff_map(const Map& from, const Map& to, Put put, Del del) {
  auto a = from.begin();
  auto b = to.begin();
  while (a != from.end() || b != to.end()) {
    if (b == to.end() || (a != from.end() && a->first < b->first)) {
      del(a->first);
      ++a;
    } else if (a == from.end() || b->first < a->first) {
      put(b->first, b->second);
      ++b;
    } else {
      if (!(a->second == b->second))
        put(b->first, b->second);
      ++a;
      ++b;
    }
  }
}

}  // namespace

void apply_change(state& s, const record& r) {
  std::visit(overloaded{
                 [&](const put_volume& x) { s.volumes[x.id] = x.value; },
                 [&](const erase_volume& x) { s.volumes.erase(x.id); },
                 [&](const put_controller_publication& x) {
                   s.controller_publications[x.volume_id][x.node_id] = x.value;
                 },
                 [&](const erase_controller_publication& x) {
                   auto it = s.controller_publications.find(x.volume_id);
                   if (it == s.controller_publications.end())
                     return;
                   it->second.erase(x.node_id);
                   if (it->second.empty())
                     s.controller_publications.erase(it);
                 },
                 [&](const put_staging& x) { s.stagings[x.path] = x.value; },
                 [&](const erase_staging& x) { s.stagings.erase(x.path); },
                 [&](const put_publication& x) { s.publications[x.target] = x.value; },
                 [&](const erase_publication& x) { s.publications.erase(x.target); },
                 [&](const put_snapshot& x) { s.snapshots[x.id] = x.value; },
                 [&](const erase_snapshot& x) { s.snapshots.erase(x.id); },
                 [&](const put_group_snapshot& x) { s.group_snapshots[x.id] = x.value; },
                 [&](const erase_group_snapshot& x) { s.group_snapshots.erase(x.id); },
             },
             r);
}

void apply_change(state& s, const std::vector<record>& rs) {
  for (const auto& r : rs)
    apply_change(s, r);
}

std::vector<record> diff(const state& from, const state& to) {
  std::vector<record> out;
  diff_map(
      from.volumes, to.volumes,
      [&](const std::string& id, const volume_record& v) { out.push_back(put_volume{id, v}); },
      [&](const std::string& id) { out.push_back(erase_volume{id}); });
  static const std::map<std::string, attachment> none;
  diff_map(
      from.controller_publications, to.controller_publications,
      [&](const std::string& vol, const std::map<std::string, attachment>& nodes) {
        auto old = from.controller_publications.find(vol);
        diff_map(
            old == from.controller_publications.end() ? none : old->second, nodes,
            [&](const std::string& node, const attachment& a) {
              out.push_back(put_controller_publication{vol, node, a});
            },
            [&](const std::string& node) {
              out.push_back(erase_controller_publication{vol, node});
            });
      },
      [&](const std::string& vol) {
        for (const auto& [node, how] : from.controller_publications.at(vol))
          out.push_back(erase_controller_publication{vol, node});
      });
  diff_map(
      from.stagings, to.stagings,
      [&](const std::string& p, const staging_record& v) { out.push_back(put_staging{p, v}); },
      [&](const std::string& p) { out.push_back(erase_staging{p}); });
  diff_map(
      from.publications, to.publications,
      [&](const std::string& t, const publication_record& v) {
        out.push_back(put_publication{t, v});
      },
      [&](const std::string& t) { out.push_back(erase_publication{t}); });
  diff_map(
      from.snapshots, to.snapshots,
      [&](const std::string& id, const snapshot_record& v) { out.push_back(put_snapshot{id, v}); },
      [&](const std::string& id) { out.push_back(erase_snapshot{id}); });
  diff_map(
      from.group_snapshots, to.group_snapshots,
      [&](const std::string& id, const group_snapshot_record& v) {
        out.push_back(put_group_snapshot{id, v});
      },
      [&](const std::string& id) { out.push_back(erase_group_snapshot{id}); });
  return out;
}

bool node_local(const record& r) {
  return std::holds_alternative<put_staging>(r) || std::holds_alternative<erase_staging>(r)
         || std::holds_alternative<put_publication>(r)
         || std::holds_alternative<erase_publication>(r);
}

state shared_part(const state& s) {
  state out = s;
  out.stagings.clear();
  out.publications.clear();
  return out;
}

state node_part(const state& s) {
  state out;  // no volumes, controller publications, snapshots or group snapshots
  out.stagings = s.stagings;
  out.publications = s.publications;
  return out;
}

std::string encode_state(const state& s) {
  json j{{"volumes", s.volumes},
         {"controller_publications", s.controller_publications},
         {"stagings", s.stagings},
         {"publications", s.publications},
         {"snapshots", s.snapshots}};
  // Written only when there are any, so a state without group snapshots is
  // the file it always was.
  if (!s.group_snapshots.empty())
    j["group_snapshots"] = s.group_snapshots;
  return j.dump(2) + "\n";
}

state decode_state(const std::string& text, const std::string& what) {
  state s;
  try {
    json j = json::parse(text);
    j.at("volumes").get_to(s.volumes);
    j.at("controller_publications").get_to(s.controller_publications);
    j.at("stagings").get_to(s.stagings);
    j.at("publications").get_to(s.publications);
    if (j.contains("snapshots"))  // absent in files written before snapshots
      j.at("snapshots").get_to(s.snapshots);
    if (j.contains("group_snapshots"))  // absent when there are none
      j.at("group_snapshots").get_to(s.group_snapshots);
  } catch (const json::exception& e) {
    throw std::runtime_error("corrupt state file " + what + ": " + e.what());
  }
  return s;
}

std::string encode_records(const std::vector<record>& rs) {
  json j = json::array();
  for (const auto& r : rs)
    j.push_back(record_json(r));
  return j.dump();
}

std::vector<record> decode_records(const std::string& text) {
  std::vector<record> out;
  try {
    json j = json::parse(text);
    if (!j.is_array())
      throw std::runtime_error("a journal entry is not a list of records");
    for (const auto& r : j)
      out.push_back(json_record(r));
  } catch (const json::exception& e) {
    throw std::runtime_error(e.what());
  }
  return out;
}

state load_state(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in)
    return {};
  std::stringstream text;
  text << in.rdbuf();
  return decode_state(text.str(), file.string());
}

int64_t save_state(const std::filesystem::path& file, const state& s) {
  auto text = encode_state(s);
  // Durable before the caller answers the RPC that changed it: the mounts
  // outlive this process, and only this file lets a later run undo them.
  if (auto f = write_file_durably(file.string(), text, "hostpath.state"))
    throw std::runtime_error(f->message);
  return static_cast<int64_t>(text.size());
}

}  // namespace berth::hostpath
