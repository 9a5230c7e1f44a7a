#pragma once
// The gRPC face of berth-hostpath: the Identity, Controller and Node services
// forwarding to one plugin. Every RPC runs under one mutex (the plugin is
// not thread-safe, and serializing also gives the spec's "one call in flight
// per volume" for free) and is recorded in the call log with its code.

#include <memory>

namespace grpc {
class ServerBuilder;
}

namespace berth::hostpath {

class plugin;
class call_log;

class services {
 public:
  services(plugin& p, call_log& log);
  ~services();
  services(const services&) = delete;
  services& operator=(const services&) = delete;

  // Registers the three services; *this must outlive the server.
  void register_with(grpc::ServerBuilder& builder);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace berth::hostpath
