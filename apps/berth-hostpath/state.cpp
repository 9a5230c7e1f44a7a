#include "state.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
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
void to_json(json& j, const volume_record& v) {
  j = json{{"name", v.name}, {"capacity_bytes", v.capacity_bytes}, {"parameters", v.parameters}};
}
void from_json(const json& j, volume_record& v) {
  j.at("name").get_to(v.name);
  j.at("capacity_bytes").get_to(v.capacity_bytes);
  j.at("parameters").get_to(v.parameters);
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

state load_state(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in)
    return {};
  state s;
  try {
    json j = json::parse(in);
    j.at("volumes").get_to(s.volumes);
    j.at("controller_publications").get_to(s.controller_publications);
    j.at("stagings").get_to(s.stagings);
    j.at("publications").get_to(s.publications);
  } catch (const json::exception& e) {
    throw std::runtime_error("corrupt state file " + file.string() + ": " + e.what());
  }
  return s;
}

void save_state(const std::filesystem::path& file, const state& s) {
  json j{{"volumes", s.volumes},
         {"controller_publications", s.controller_publications},
         {"stagings", s.stagings},
         {"publications", s.publications}};
  // Durable before the caller answers the RPC that changed it: the mounts
  // outlive this process, and only this file lets a later run undo them.
  if (auto f = write_file_durably(file.string(), j.dump(2) + "\n", "hostpath.state"))
    throw std::runtime_error(f->message);
}

}  // namespace berth::hostpath
