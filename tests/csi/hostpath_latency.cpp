// hostpath_latency: per-call latency of a running berth-hostpath, for the
// numbers in commit messages and docs (not a test: timings are not asserted
// anywhere). Drives K volumes through CreateVolume, ControllerPublishVolume,
// NodeStageVolume and NodePublishVolume, T callers at once, and prints the
// mean, p50, p99 and max of each method as the client saw it.
//
//   hostpath_latency unix:///path/csi.sock NODE-ID CO-DIR [K=200] [T=1]
//
// CO-DIR: where the staging and target paths are made (the CO's job).
// Prefill the plugin's state first to see how the cost depends on it
// (tests/csi/hostpath_prefill.py writes a state.json of N volumes).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "csi/csi.grpc.pb.h"

namespace v1 = csi::v1;
namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ENDPOINT NODE-ID CO-DIR [K] [T]\n", argv[0]);
    return 2;
  }
  std::string endpoint = argv[1], node = argv[2];
  fs::path co = argv[3];
  int k = argc > 4 ? std::stoi(argv[4]) : 200;
  int t = argc > 5 ? std::stoi(argv[5]) : 1;
  std::string run = std::to_string(std::chrono::system_clock::now().time_since_epoch().count());

  std::mutex mu;
  std::map<std::string, std::vector<double>> ms;
  int failures = 0;
  auto worker = [&](int w) {
    auto ch = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
    auto ctrl = v1::Controller::NewStub(ch);
    auto nd = v1::Node::NewStub(ch);
    v1::VolumeCapability cap;
    cap.mutable_mount();
    cap.mutable_access_mode()->set_mode(v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    for (int i = w; i < k; i += t) {
      auto tag = run + "-" + std::to_string(i);
      auto staging = co / ("staging-" + tag), target = co / "pods" / ("pod-" + tag);
      fs::create_directories(staging);
      fs::create_directories(target.parent_path());
      auto timed = [&](const char* name, auto fn) {
        grpc::ClientContext ctx;
        auto t0 = clk::now();
        grpc::Status s = fn(&ctx);
        double d = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
        std::lock_guard<std::mutex> lock(mu);
        ms[name].push_back(d);
        if (!s.ok()) {
          ++failures;
          std::fprintf(stderr, "%s: %d %s\n", name, s.error_code(), s.error_message().c_str());
        }
      };
      std::string id;
      timed("CreateVolume", [&](grpc::ClientContext* ctx) {
        v1::CreateVolumeRequest req;
        req.set_name("lat-" + tag);
        req.mutable_capacity_range()->set_required_bytes(1 << 20);
        *req.add_volume_capabilities() = cap;
        v1::CreateVolumeResponse resp;
        auto s = ctrl->CreateVolume(ctx, req, &resp);
        id = resp.volume().volume_id();
        return s;
      });
      timed("ControllerPublishVolume", [&](grpc::ClientContext* ctx) {
        v1::ControllerPublishVolumeRequest req;
        req.set_volume_id(id);
        req.set_node_id(node);
        *req.mutable_volume_capability() = cap;
        v1::ControllerPublishVolumeResponse resp;
        return ctrl->ControllerPublishVolume(ctx, req, &resp);
      });
      timed("NodeStageVolume", [&](grpc::ClientContext* ctx) {
        v1::NodeStageVolumeRequest req;
        req.set_volume_id(id);
        req.set_staging_target_path(staging.string());
        *req.mutable_volume_capability() = cap;
        v1::NodeStageVolumeResponse resp;
        return nd->NodeStageVolume(ctx, req, &resp);
      });
      timed("NodePublishVolume", [&](grpc::ClientContext* ctx) {
        v1::NodePublishVolumeRequest req;
        req.set_volume_id(id);
        req.set_staging_target_path(staging.string());
        req.set_target_path(target.string());
        *req.mutable_volume_capability() = cap;
        v1::NodePublishVolumeResponse resp;
        return nd->NodePublishVolume(ctx, req, &resp);
      });
    }
  };
  auto t0 = clk::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < t; ++w)
    threads.emplace_back(worker, w);
  for (auto& th : threads)
    th.join();
  double total = std::chrono::duration<double>(clk::now() - t0).count();
  std::printf("%-26s %6s %8s %8s %8s %8s\n", "method (ms)", "n", "mean", "p50", "p99", "max");
  for (auto& [name, v] : ms) {
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double d : v)
      sum += d;
    auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
    std::printf("%-26s %6zu %8.2f %8.2f %8.2f %8.2f\n", name.c_str(), v.size(), sum / v.size(),
                at(0.5), at(0.99), v.back());
  }
  std::printf("%d volumes x 4 calls, %d callers: %.2f s, %d failures\n", k, t, total, failures);
  return failures == 0 ? 0 : 1;
}
