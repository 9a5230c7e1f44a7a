#pragma once
// Helpers of the berth-hostpath tests: stubs on a plugin's socket, one
// macro per RPC (CALL), and the requests the tests build again and again.

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "csi/csi.grpc.pb.h"
#include "plugin_process.hpp"

namespace hostpath_test {

namespace fs = std::filesystem;
namespace v1 = csi::v1;
using berth::test::plugin_process;
using grpc::StatusCode;
using Mode = v1::VolumeCapability::AccessMode;

struct stubs {
  explicit stubs(const std::string& endpoint)
      : channel(grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials())),
        identity(v1::Identity::NewStub(channel)),
        controller(v1::Controller::NewStub(channel)),
        node(v1::Node::NewStub(channel)),
        group(v1::GroupController::NewStub(channel)) {}
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Identity::Stub> identity;
  std::unique_ptr<v1::Controller::Stub> controller;
  std::unique_ptr<v1::Node::Stub> node;
  std::unique_ptr<v1::GroupController::Stub> group;
};

template <class Resp>
struct reply {
  StatusCode code;
  std::string message;
  Resp resp;
};

template <class Resp, class Fn>
reply<Resp> call(Fn&& fn) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  reply<Resp> r;
  auto s = fn(&ctx, &r.resp);
  r.code = s.error_code();
  r.message = s.error_message();
  return r;
}

// CALL(c, controller, CreateVolume, req): one RPC on stubs `c`, returning a
// reply<CreateVolumeResponse>.
#define CALL(c, svc, name, req)                                               \
  call<v1::name##Response>([&](grpc::ClientContext* ctx, v1::name##Response* r) { \
    return (c).svc->name(ctx, req, r);                                        \
  })

inline v1::VolumeCapability mount_cap(Mode::Mode mode = Mode::SINGLE_NODE_WRITER) {
  v1::VolumeCapability cap;
  cap.mutable_mount();
  cap.mutable_access_mode()->set_mode(mode);
  return cap;
}

inline v1::CreateVolumeRequest create_req(const std::string& name, int64_t required = 1 << 20,
                                   Mode::Mode mode = Mode::SINGLE_NODE_WRITER) {
  v1::CreateVolumeRequest req;
  req.set_name(name);
  req.mutable_capacity_range()->set_required_bytes(required);
  *req.add_volume_capabilities() = mount_cap(mode);
  return req;
}

inline std::string create(stubs& c, const std::string& name,
                   Mode::Mode mode = Mode::SINGLE_NODE_WRITER) {
  auto r = CALL(c, controller, CreateVolume, create_req(name, 1 << 20, mode));
  REQUIRE(r.code == StatusCode::OK);
  return r.resp.volume().volume_id();
}

inline v1::ControllerPublishVolumeRequest cpub_req(const std::string& vol, const std::string& node,
                                            Mode::Mode mode = Mode::SINGLE_NODE_WRITER,
                                            bool readonly = false) {
  v1::ControllerPublishVolumeRequest req;
  req.set_volume_id(vol);
  req.set_node_id(node);
  *req.mutable_volume_capability() = mount_cap(mode);
  req.set_readonly(readonly);
  return req;
}

inline v1::NodeStageVolumeRequest stage_req(const std::string& vol, const fs::path& staging,
                                     Mode::Mode mode = Mode::SINGLE_NODE_WRITER) {
  v1::NodeStageVolumeRequest req;
  req.set_volume_id(vol);
  req.set_staging_target_path(staging.string());
  *req.mutable_volume_capability() = mount_cap(mode);
  return req;
}

inline v1::NodePublishVolumeRequest pub_req(const std::string& vol, const fs::path& staging,
                                     const fs::path& target, bool readonly = false,
                                     Mode::Mode mode = Mode::SINGLE_NODE_WRITER) {
  v1::NodePublishVolumeRequest req;
  req.set_volume_id(vol);
  req.set_staging_target_path(staging.string());
  req.set_target_path(target.string());
  *req.mutable_volume_capability() = mount_cap(mode);
  req.set_readonly(readonly);
  return req;
}

inline v1::NodeUnpublishVolumeRequest unpub_req(const std::string& vol, const fs::path& target) {
  v1::NodeUnpublishVolumeRequest req;
  req.set_volume_id(vol);
  req.set_target_path(target.string());
  return req;
}

inline v1::NodeUnstageVolumeRequest unstage_req(const std::string& vol, const fs::path& staging) {
  v1::NodeUnstageVolumeRequest req;
  req.set_volume_id(vol);
  req.set_staging_target_path(staging.string());
  return req;
}

// The CO creates the staging directory and the target's parent (spec).
inline fs::path co_dir(const plugin_process& p, const std::string& name) {
  auto d = p.dir / "co" / name;
  fs::create_directories(d);
  return d;
}

// Starts `p` with BERTH_CRASHPOINT=`point` (e.g. "hostpath.journal.after_sync@2")
// in its environment only: the variable is unset again however start ends.
inline void start_with_crashpoint(plugin_process& p, const std::string& point) {
  ::setenv("BERTH_CRASHPOINT", point.c_str(), 1);
  try {
    p.start();
  } catch (...) {
    ::unsetenv("BERTH_CRASHPOINT");
    throw;
  }
  ::unsetenv("BERTH_CRASHPOINT");
}

inline std::vector<std::string> mode_args(bool bind) {
  return {"--mount-mode", bind ? "bind" : "symlink"};
}

inline std::vector<nlohmann::json> read_log(const fs::path& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    lines.push_back(nlohmann::json::parse(line));
  return lines;
}


}  // namespace hostpath_test
