// etcd-put: a load generator for etcd's KV.Put (gRPC), the etcd side of
// bench/run.py's log comparison (bench/etcd_bench.py runs it).
//
// Why it exists: berth-bench drives berth from compiled C++, keeping many
// requests in flight on one connection.  etcd used to be driven by Python
// threads through its JSON gateway (one blocking HTTP/1.1 request per thread
// and connection, a JSON decode and an in-process gRPC hop in etcd); that
// measured the client and the gateway as much as etcd.  This drives etcd the
// way berth-bench drives berth: one thread, gRPC's async API (one
// CompletionQueue), --in-flight requests kept outstanding over a few
// channels (--connections, each its own TCP connection) to one member.
//
// Each request puts a new key (unique within and across runs).  The default
// sizes make etcd's replicated entry the size of berth's: a put's
// InternalRaftRequest (header with its 8-byte request id, then the
// PutRequest) of a 16-byte key and a 96-byte value is 131 bytes, like the
// 131-byte LogEntry of berth-bench's log workload (its `entry_bytes`).
//
// Like berth-bench: --warmup seconds of unmeasured load first; an
// operation is measured if it starts after the warm-up; its latency
// (steady_clock) runs from its first send to its successful answer, a
// failed put being sent again after 10 ms (until the end: then it is
// abandoned); `seconds` runs from the end of the warm-up to the last
// answer.  Prints one JSON line; numbers only.
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "etcd/kv.grpc.pb.h"

namespace {

using clk = std::chrono::steady_clock;

struct options {
  std::string endpoints = "127.0.0.1:2379";
  size_t connections = 4;
  size_t in_flight = 1;
  double duration = 10;
  double warmup = 1;
  size_t key_bytes = 16;
  size_t value_bytes = 96;
  int timeout = 30;  // seconds per request
};

// One slot: one request outstanding at a time.
struct slot {
  etcdserverpb::KV::Stub* stub = nullptr;
  etcdserverpb::PutRequest req;
  etcdserverpb::PutResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::ClientAsyncResponseReader<etcdserverpb::PutResponse>> rpc;
  grpc::Alarm alarm;     // the 10 ms pause before a failed put is sent again
  bool waiting = false;  // the next event of this slot is its alarm
  clk::time_point op_start;
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s)
    if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) out += c;
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"etcd-put: puts to etcd over gRPC, many in flight; prints one JSON line"};
  app.add_option("--endpoints", o.endpoints,
                 "HOST:PORT,... of etcd members; the first is used (pass the leader first)");
  app.add_option("--connections", o.connections, "gRPC channels (TCP connections)")
      ->check(CLI::PositiveNumber);
  app.add_option("--in-flight,-c", o.in_flight, "requests outstanding in total")
      ->check(CLI::PositiveNumber);
  app.add_option("--duration", o.duration, "seconds to measure");
  app.add_option("--warmup", o.warmup, "seconds of unmeasured load before measuring");
  app.add_option("--key-bytes", o.key_bytes, "bytes per key (at least 16)")->check(CLI::Range(16, 4096));
  app.add_option("--value-bytes", o.value_bytes, "bytes per value");
  app.add_option("--timeout", o.timeout, "seconds per request")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  std::string endpoint = o.endpoints.substr(0, o.endpoints.find(','));
  o.connections = std::min(o.connections, o.in_flight);

  // Channels with distinct arguments do not share a subchannel, so each is
  // its own TCP connection.
  std::vector<std::unique_ptr<etcdserverpb::KV::Stub>> stubs;
  auto connect_by = std::chrono::system_clock::now() + std::chrono::seconds(10);
  for (size_t i = 0; i < o.connections; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("berth.etcd_put.channel", static_cast<int>(i));
    auto ch = grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args);
    if (!ch->WaitForConnected(connect_by)) {
      std::cerr << "etcd-put: cannot reach " << endpoint << "\n";
      return 5;
    }
    stubs.push_back(etcdserverpb::KV::NewStub(ch));
  }

  // Keys: "e", a run tag (6 hex digits of pid and clock), "-", then a
  // counter zero-padded to --key-bytes.
  std::string prefix;
  {
    std::ostringstream s;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
    s << std::hex << ((static_cast<unsigned long long>(::getpid()) << 20) ^ static_cast<unsigned long long>(us));
    prefix = "e" + s.str().substr(s.str().size() > 6 ? s.str().size() - 6 : 0) + "-";
  }
  size_t digits = o.key_bytes - prefix.size();  // >= 8 with --key-bytes >= 16
  unsigned long long counter = 0;
  auto next_key = [&] {
    std::string n = std::to_string(counter++);
    return prefix + std::string(digits > n.size() ? digits - n.size() : 0, '0') + n;
  };
  const std::string value(o.value_bytes, 'v');

  grpc::CompletionQueue cq;
  std::vector<slot> slots(o.in_flight);
  auto send = [&](slot& s) {
    s.ctx = std::make_unique<grpc::ClientContext>();
    s.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(o.timeout));
    s.rpc = s.stub->AsyncPut(s.ctx.get(), s.req, &cq);
    s.rpc->Finish(&s.resp, &s.status, &s);
  };
  auto start_op = [&](slot& s, clk::time_point now) {
    s.req.set_key(next_key());
    s.req.set_value(value);
    s.op_start = now;
    send(s);
  };

  std::vector<double> lat;
  lat.reserve(1 << 20);
  unsigned long long ops = 0, ops_all = 0, errors = 0, abandoned = 0;
  std::vector<std::string> error_samples;
  auto t0 = clk::now();
  auto measure_from = t0 + std::chrono::microseconds(static_cast<int64_t>(o.warmup * 1e6));
  auto deadline = measure_from + std::chrono::microseconds(static_cast<int64_t>(o.duration * 1e6));
  auto last = t0;
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i].stub = stubs[i % stubs.size()].get();
    start_op(slots[i], t0);
  }
  size_t active = slots.size();
  void* tag;
  bool ok;
  while (active > 0 && cq.Next(&tag, &ok)) {
    auto& s = *static_cast<slot*>(tag);
    auto now = clk::now();
    if (s.waiting) {  // the pause after a failure is over: the same put again
      s.waiting = false;
      send(s);
      continue;
    }
    if (!s.status.ok()) {
      ++errors;
      if (error_samples.size() < 5)
        error_samples.push_back(std::to_string(s.status.error_code()) + " " + s.status.error_message());
      if (now >= deadline) {  // not sent again after the end: a dead etcd cannot hang the run
        ++abandoned;
        --active;
        continue;
      }
      s.waiting = true;
      s.alarm.Set(&cq, std::chrono::system_clock::now() + std::chrono::milliseconds(10), &s);
      continue;
    }
    ++ops_all;
    last = now;
    if (s.op_start >= measure_from) {
      ++ops;
      lat.push_back(std::chrono::duration<double>(now - s.op_start).count());
    }
    if (now >= deadline)
      --active;
    else
      start_op(s, now);
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }

  double seconds = std::chrono::duration<double>(last - measure_from).count();
  if (seconds <= 0) seconds = 0;
  double mx = lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end());
  double p50 = percentile(lat, 0.50) * 1000, p99 = percentile(lat, 0.99) * 1000;
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "{\"driver\": \"etcd-put (gRPC, C++)\", \"endpoint\": %s, \"connections\": %zu, "
                "\"in_flight\": %zu, \"key_bytes\": %zu, \"value_bytes\": %zu, \"ops\": %llu, "
                "\"errors\": %llu, \"seconds\": %.3f, \"ops_per_s\": %.1f, \"p50_ms\": %.3f, "
                "\"p99_ms\": %.3f, \"max_ms\": %.3f, \"ops_all\": %llu, \"abandoned\": %llu",
                json_string(endpoint).c_str(), o.connections, o.in_flight, o.key_bytes, o.value_bytes,
                ops, errors, seconds, seconds > 0 ? static_cast<double>(ops) / seconds : 0.0, p50, p99,
                mx * 1000, ops_all, abandoned);
  std::cout << buf << ", \"error_samples\": [";
  for (size_t i = 0; i < error_samples.size(); ++i)
    std::cout << (i ? ", " : "") << json_string(error_samples[i]);
  std::cout << "]}" << std::endl;
  return 0;
}
