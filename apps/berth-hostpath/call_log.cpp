#include "call_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace berth::hostpath {

call_log::call_log(const std::filesystem::path& file) {
  if (file.empty())
    return;
  fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0)
    throw std::runtime_error("cannot open call log " + file.string() + ": "
                             + std::strerror(errno));
}

call_log::~call_log() {
  if (fd_ >= 0)
    ::close(fd_);
}

void call_log::append(const std::string& method,
                      const std::map<std::string, std::string>& fields, int code,
                      const std::string& code_name, int64_t at_ns,
                      int64_t end_ns) {
  if (fd_ < 0)
    return;
  nlohmann::json j{{"method", method}};
  for (const auto& [k, v] : fields)
    if (v == "true")
      j[k] = true;
    else if (!v.empty())
      j[k] = v;
  j["code"] = code;
  j["code_name"] = code_name;
  if (at_ns >= 0)
    j["at_ns"] = at_ns;
  if (end_ns >= 0)
    j["end_ns"] = end_ns;
  // One write(2) per line with O_APPEND keeps lines whole; a failed log write
  // is not worth failing the RPC for, so errors here are ignored.
  auto line = j.dump() + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (::write(fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size()))
    ::fsync(fd_);
}

}  // namespace berth::hostpath
