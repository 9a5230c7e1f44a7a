// Human output of the shell: aligned tables, "key = value" details and
// relative times.  JSON output is messages/codec's job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/api.pb.h"
#include "messages/codec.hpp"  // plugin_in

namespace berth {

struct table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

// Columns aligned by their widest cell, two spaces apart; cells are never
// cut.
std::string render_table(const table& t);

// "3s ago", "5m ago", "2h ago", "4d ago"; "-" for 0.
std::string relative_time(int64_t then_ms, int64_t now_ms);

std::string render_volume_list(const v1::Response& r, int64_t now_ms);
std::string render_volume(const v1::Volume& v, const v1::Plugin* p, int64_t now_ms);
std::string render_plugin_list(const v1::Response& r);
std::string render_plugin(const v1::Plugin& p, int64_t now_ms);
std::string render_node_list(const v1::Response& r, int64_t now_ms);
std::string render_node(const v1::Response& r, int64_t now_ms);
std::string render_raft_peers(const v1::Response& r);
std::string render_agent(const v1::AgentStatus& a);
std::string render_alloc_list(const v1::Response& r, int64_t now_ms);
// alloc run --explain: every node, whether the alloc fits there and why not.
std::string render_placement(const v1::Response& r);
std::string render_alloc(const v1::Response& r, int64_t now_ms);
// volume snapshot create and list: one row per snapshot.
std::string render_snapshot_list(const v1::Response& r, int64_t now_ms);

}  // namespace berth
