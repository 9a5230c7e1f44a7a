#include "state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

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

namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& p) {
  throw std::runtime_error(what + " " + p.string() + ": " + std::strerror(errno));
}

void write_all(int fd, const std::string& data, const std::filesystem::path& p) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail("cannot write", p);
    done += static_cast<size_t>(n);
  }
}

}  // namespace

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
  auto tmp = file;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    fail("cannot create", tmp);
  try {
    write_all(fd, j.dump(2) + "\n", tmp);
    if (::fsync(fd) != 0)
      fail("cannot fsync", tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), file.c_str()) != 0)
    fail("cannot rename over", file);
  // The rename is durable only once the directory entry is on disk.
  auto dir = file.parent_path();
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    fail("cannot open", dir);
  int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0)
    fail("cannot fsync", dir);
}

}  // namespace berth::hostpath
