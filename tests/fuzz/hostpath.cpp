// Fuzz target: berth-hostpath's request handling, without gRPC and without
// mounts.  Each input is a sequence of up to 16 calls; a call is a selector
// byte (which RPC), a 2-byte length and that many bytes of the encoded
// request protobuf.  The calls go to a fresh plugin (a temp root under
// /dev/shm, --mount-mode=symlink) in order, so that sequences reach the
// stateful paths (create, publish, stage, publish again...).
//
// Paths in requests (target_path, staging_target_path) are confined to the
// temp root: the fuzzer runs as root on a real filesystem, and a CO only
// passes paths under its own directory anyway.  The rest of the request is
// as fuzzed.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "hostpath.hpp"

namespace {

namespace fs = std::filesystem;
namespace cv = ::csi::v1;
using berth::hostpath::plugin;

const fs::path& work_dir() {
  static const fs::path dir = [] {
    fs::path base = fs::exists("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    auto d = base / ("berth-fuzz-hostpath-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::atexit([] { fs::remove_all(work_dir()); });
    return d;
  }();
  return dir;
}

// A path under the root made of the fuzzed path's safe characters.
void confine(std::string* path, const fs::path& root) {
  if (path->empty()) return;
  std::string tail;
  for (char c : *path)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') tail.push_back(c);
  if (tail.size() > 32) tail.resize(32);
  *path = (root / "paths" / ("p" + tail)).string();
}

// BERTH_FUZZ_VERBOSE=1: print each call's answer (to check the seeds).
const bool verbose = std::getenv("BERTH_FUZZ_VERBOSE") != nullptr;

template <class Req, class Resp, class Fn>
void call(const std::string& bytes, const fs::path& root, Fn fn) {
  Req req;
  if (!req.ParseFromString(bytes)) {
    if (verbose) std::fprintf(stderr, "  %s: undecodable\n", Req::descriptor()->name().c_str());
    return;
  }
  if constexpr (std::is_same_v<Req, cv::NodeStageVolumeRequest> ||
                std::is_same_v<Req, cv::NodeUnstageVolumeRequest>)
    confine(req.mutable_staging_target_path(), root);
  if constexpr (std::is_same_v<Req, cv::NodePublishVolumeRequest>) {
    confine(req.mutable_staging_target_path(), root);
    confine(req.mutable_target_path(), root);
  }
  if constexpr (std::is_same_v<Req, cv::NodeUnpublishVolumeRequest>)
    confine(req.mutable_target_path(), root);
  if constexpr (std::is_same_v<Req, cv::NodeGetVolumeStatsRequest>) {
    confine(req.mutable_volume_path(), root);
    confine(req.mutable_staging_target_path(), root);
  }
  Resp resp;
  grpc::Status status = fn(req, resp);
  if (verbose)
    std::fprintf(stderr, "  %s: %d %s\n", Req::descriptor()->name().c_str(),
                 static_cast<int>(status.error_code()), status.error_message().c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto root = work_dir() / "root";
  fs::remove_all(root);
  fs::create_directories(root / "paths");
  berth::hostpath::options opts;
  opts.root = root;
  opts.node_id = "n1";
  opts.max_volumes = 4;
  opts.topology = {{"zone", "a"}};
  opts.mode = berth::hostpath::mount_mode::symlink;
  opts.peer_nodes = {"n2"};
  plugin p(opts);
  size_t at = 0;
  for (int n = 0; n < 16 && at + 3 <= size; ++n) {
    unsigned selector = data[at];
    size_t len = data[at + 1] | (size_t{data[at + 2]} << 8);
    at += 3;
    if (len > size - at) len = size - at;
    std::string bytes(reinterpret_cast<const char*>(data + at), len);
    at += len;
    // clang-format off
    switch (selector % 17) {
      case 0: call<cv::GetPluginInfoRequest, cv::GetPluginInfoResponse>(bytes, root, [&](auto& q, auto& r) { return p.get_plugin_info(q, r); }); break;
      case 1: call<cv::GetPluginCapabilitiesRequest, cv::GetPluginCapabilitiesResponse>(bytes, root, [&](auto& q, auto& r) { return p.get_plugin_capabilities(q, r); }); break;
      case 2: call<cv::ProbeRequest, cv::ProbeResponse>(bytes, root, [&](auto& q, auto& r) { return p.probe(q, r); }); break;
      case 3: call<cv::CreateVolumeRequest, cv::CreateVolumeResponse>(bytes, root, [&](auto& q, auto& r) { return p.create_volume(q, r); }); break;
      case 4: call<cv::DeleteVolumeRequest, cv::DeleteVolumeResponse>(bytes, root, [&](auto& q, auto& r) { return p.delete_volume(q, r); }); break;
      case 5: call<cv::ControllerPublishVolumeRequest, cv::ControllerPublishVolumeResponse>(bytes, root, [&](auto& q, auto& r) { return p.controller_publish(q, r); }); break;
      case 6: call<cv::ControllerUnpublishVolumeRequest, cv::ControllerUnpublishVolumeResponse>(bytes, root, [&](auto& q, auto& r) { return p.controller_unpublish(q, r); }); break;
      case 7: call<cv::ValidateVolumeCapabilitiesRequest, cv::ValidateVolumeCapabilitiesResponse>(bytes, root, [&](auto& q, auto& r) { return p.validate_capabilities(q, r); }); break;
      case 8: call<cv::ListVolumesRequest, cv::ListVolumesResponse>(bytes, root, [&](auto& q, auto& r) { return p.list_volumes(q, r); }); break;
      case 9: call<cv::GetCapacityRequest, cv::GetCapacityResponse>(bytes, root, [&](auto& q, auto& r) { return p.get_capacity(q, r); }); break;
      case 10: call<cv::ControllerGetCapabilitiesRequest, cv::ControllerGetCapabilitiesResponse>(bytes, root, [&](auto& q, auto& r) { return p.controller_capabilities(q, r); }); break;
      case 11: call<cv::NodeStageVolumeRequest, cv::NodeStageVolumeResponse>(bytes, root, [&](auto& q, auto& r) { return p.node_stage(q, r); }); break;
      case 12: call<cv::NodeUnstageVolumeRequest, cv::NodeUnstageVolumeResponse>(bytes, root, [&](auto& q, auto& r) { return p.node_unstage(q, r); }); break;
      case 13: call<cv::NodePublishVolumeRequest, cv::NodePublishVolumeResponse>(bytes, root, [&](auto& q, auto& r) { return p.node_publish(q, r); }); break;
      case 14: call<cv::NodeUnpublishVolumeRequest, cv::NodeUnpublishVolumeResponse>(bytes, root, [&](auto& q, auto& r) { return p.node_unpublish(q, r); }); break;
      case 15: call<cv::NodeGetVolumeStatsRequest, cv::NodeGetVolumeStatsResponse>(bytes, root, [&](auto& q, auto& r) { return p.node_volume_stats(q, r); }); break;
      case 16: call<cv::NodeGetInfoRequest, cv::NodeGetInfoResponse>(bytes, root, [&](auto& q, auto& r) { return p.node_info(q, r); }); break;
    }
    // clang-format on
  }
  return 0;
}
