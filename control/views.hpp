// What the leader answers to reads and after writes: responses built from
// the committed catalog, with volumes redacted (no secrets, no mount flags).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

v1::Response error_response(const failure& f);

// A redacted volume and its plugin (for health) added to a response.
void add_volume(const catalog& c, v1::Response& r, const v1::Volume& v);

v1::Response volume_response(const catalog& c, const v1::Volume& v, std::string message);
v1::Response alloc_response(const v1::Alloc& a, std::string message);

// The volume a request names, or not_found / invalid naming the fix.
struct volume_lookup {
  std::optional<failure> error;
  volume_key key;
};
volume_lookup lookup_volume(const catalog& c, const std::string& ns, const std::string& id);

// Whether the request only reads the catalog (status and lists): the
// leader answers it after confirming it leads; nothing changes.
bool is_read(const v1::Request& r);

// Answers a read request (volume, alloc, plugin and node status and
// lists); nullopt when the request is not a read.  `last_seen_ms` gives a
// node's last heartbeat in wall-clock ms (0: not seen by this leader).
std::optional<v1::Response> answer_read(
    const catalog& c, const v1::Request& req,
    const std::function<int64_t(const std::string&)>& last_seen_ms);

}  // namespace berth
