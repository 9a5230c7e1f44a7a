// berth-bench: a load generator for a berthd's shell endpoint.  It speaks
// the shell's protocol (api_atom, pb<Request> -> pb<Response>) over CAF's
// middleman, like apps/berth/client.cpp, but keeps N requests in flight from
// one event-based actor, and prints one JSON line of results:
//
//   log     plugin fingerprints, one plugin per slot, each changing the
//           instance's health description: exactly one ~100-byte log entry
//           per request, no CSI call.
//   claims  claim (ControllerPublish, NodeStage, NodePublish) + release
//           (NodeUnpublish, NodeUnstage, ControllerUnpublish, free) cycles,
//           each slot cycling over its own share of the volumes.
//   setup   creates the volumes the claims workload uses (CreateVolume).
//   register registers volumes scale-v0..N-1 (volume register: one log
//           entry each, no CSI call; the plugin must be known, e.g. a log
//           workload's bench-p0), N in flight: the scale workload.
//   storm   an attach storm: one claim for writing of every volume
//           PREFIX0..N-1 (alloc storm-PREFIX<i>-TAG), all N sent at once (one slot
//           per volume), none released; `seconds` is the time from sending
//           them to the last acknowledgement (claim committed and published:
//           ControllerPublish, NodeStage, NodePublish).
//   unstorm releases the claims a storm made, all at once.
//
// Numbers only: it never judges them.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "control/entries.hpp"
#include "messages/model.hpp"
#include "persistence/state_store.hpp"
#include "tls/caf_tls.hpp"

using namespace berth;
using clk = std::chrono::steady_clock;
using retry_atom = caf::atom_constant<caf::atom("retry")>;
using start_atom = caf::atom_constant<caf::atom("start")>;

namespace {

struct options {
  tls::files tls;  // --tls-ca, --tls-cert, --tls-key (all or none)
  std::string address = "127.0.0.1:4747";
  std::string workload = "log";
  size_t concurrency = 1;
  double duration = 10;   // seconds of measurement (count = 0)
  size_t count = 0;       // operations to complete instead of a duration
  double warmup = 1;      // seconds of unmeasured load first
  size_t volumes = 200;   // claims/setup: volumes bench-v0..N-1
  std::vector<std::string> nodes{"c1=hostpath-c1", "c2=hostpath-c2"};  // NODE=PLUGIN
  std::string acks;       // file: wall-clock ms of every acknowledged operation
  int timeout = 30;       // seconds per request
  size_t payload = 60;    // log: bytes of health_description
  std::string plugin = "bench-p0";  // register: the volumes' plugin
  size_t first = 0;       // register: first volume number
  double give_up = 0;     // abandon unfinished operations this long after the end (0: never)
  std::string prefix = "bench-v";  // claims/setup/storm: volume ids PREFIX0..N-1
  std::string only_node;  // claims: only the volumes of this node
  std::string latency_log;  // file: "start_ms end_ms" (wall clock) of every measured operation
  std::string alloc_tag = "0";  // storm/unstorm: allocs storm-PREFIX<i>-TAG
};

// One operation = one request (log, setup) or one claim+release cycle.
struct worker {
  virtual ~worker() = default;
  // The next request of this slot; sets `ends_op` when its response
  // completes an operation.
  virtual v1::Request next(bool& ends_op) = 0;
  // The response was ok: move on.
  virtual void done() {}
  // Nothing left to do for this slot.
  virtual bool finished() const { return false; }
  // Whether the request just answered with an error is a release whose
  // claim is already gone (NOT_FOUND: freed by someone else, e.g. the
  // volume watcher after a release the bench saw fail): its goal is
  // reached, so the operation ends instead of repeating it forever.
  virtual bool release_gone(const v1::Response&) const { return false; }
};

std::string pad(std::string s, size_t n) {
  if (s.size() < n) s.append(n - s.size(), '.');
  return s;
}

struct log_worker : worker {
  std::string plugin, node;
  size_t payload;
  uint64_t counter = 0;
  log_worker(size_t slot, size_t payload)
      : plugin("bench-p" + std::to_string(slot)), node("bench-n" + std::to_string(slot)),
        payload(payload) {}
  static v1::Fingerprint fingerprint(const std::string& plugin, const std::string& node,
                                     uint64_t counter, size_t payload) {
    v1::Fingerprint f;
    f.set_plugin_id(plugin);
    f.set_node_id(node);
    f.set_type(v1::PLUGIN_NODE);
    auto* i = f.mutable_instance();
    i->set_healthy(true);
    i->set_health_description(pad("bench " + std::to_string(counter), payload));
    i->set_provider("bench");
    i->set_provider_version("1");
    return f;
  }
  v1::Request next(bool& ends_op) override {
    ends_op = true;
    v1::Request r;
    *r.mutable_plugin_fingerprint() = fingerprint(plugin, node, counter, payload);
    return r;
  }
  void done() override { ++counter; }
};

// The bytes of the log entry one log request makes, built the way the
// plugin actor builds it (upsert_instance, then the index stamp).
size_t log_entry_bytes(size_t payload) {
  auto f = log_worker::fingerprint("bench-p100", "bench-n100", 123456, payload);
  v1::Plugin p;
  p.set_id(f.plugin_id());
  auto inst = f.instance();
  inst.set_node_id(f.node_id());
  inst.set_updated_at_ms(1700000000000);
  upsert_instance(p, f.type(), inst);
  auto c = upsert_change(std::move(p));
  stamp(c, 1000000);
  return make_entry({std::move(c)}).ByteSizeLong();
}

std::pair<std::string, std::string> node_plugin(const options& o, size_t volume) {
  const auto& np = o.nodes[volume % o.nodes.size()];
  auto eq = np.find('=');
  return {np.substr(0, eq), np.substr(eq + 1)};
}

struct setup_worker : worker {
  const options& o;
  size_t next_volume;
  size_t stride;
  setup_worker(const options& o, size_t slot, size_t stride)
      : o(o), next_volume(slot), stride(stride) {}
  v1::Request next(bool& ends_op) override {
    ends_op = true;
    v1::Request r;
    auto* v = r.mutable_volume_create();
    v->set_id(o.prefix + std::to_string(next_volume));
    v->set_plugin_id(node_plugin(o, next_volume).second);
    auto* c = v->add_capabilities();
    c->set_access_mode(v1::SINGLE_NODE_WRITER);
    c->set_attachment_mode(v1::FILE_SYSTEM);
    return r;
  }
  void done() override { next_volume += stride; }
  bool finished() const override { return next_volume >= o.volumes; }
};

// Registers scale-v<first + slot>, then every stride-th one up to volumes.
struct register_worker : worker {
  const options& o;
  size_t next_volume;
  size_t stride;
  register_worker(const options& o, size_t slot, size_t stride)
      : o(o), next_volume(o.first + slot), stride(stride) {}
  v1::Request next(bool& ends_op) override {
    ends_op = true;
    v1::Request r;
    auto* v = r.mutable_volume_register();
    auto n = std::to_string(next_volume);
    v->set_id("scale-v" + n);
    v->set_plugin_id(o.plugin);
    v->set_external_id("ext-" + n);
    auto* c = v->add_capabilities();
    c->set_access_mode(v1::SINGLE_NODE_WRITER);
    c->set_attachment_mode(v1::FILE_SYSTEM);
    return r;
  }
  void done() override { next_volume += stride; }
  bool finished() const override { return next_volume >= o.volumes; }
};

struct claims_worker : worker {
  const options& o;
  std::vector<size_t> mine;  // this slot's volumes
  size_t pos = 0;
  uint64_t cycle = 0;
  bool claimed = false;
  std::string tag;  // per process: alloc ids never repeat across runs
  claims_worker(const options& o, size_t slot, size_t slots, std::string tag) : o(o), tag(std::move(tag)) {
    // With --only-node: the slot's share of that node's volumes.
    std::vector<size_t> vols;
    for (size_t v = 0; v < o.volumes; ++v)
      if (o.only_node.empty() || node_plugin(o, v).first == o.only_node) vols.push_back(v);
    for (size_t k = slot; k < vols.size(); k += slots) mine.push_back(vols[k]);
  }
  v1::Request next(bool& ends_op) override {
    auto v = mine[pos];
    auto id = o.prefix + std::to_string(v);
    auto alloc = "a-" + tag + "-" + std::to_string(v) + "-" + std::to_string(cycle);
    v1::Request r;
    if (!claimed) {
      auto* c = r.mutable_volume_claim();
      c->set_volume_id(id);
      c->set_alloc_id(alloc);
      c->set_node_id(node_plugin(o, v).first);
      ends_op = false;
    } else {
      auto* c = r.mutable_volume_release();
      c->set_volume_id(id);
      c->set_alloc_id(alloc);
      ends_op = true;
    }
    return r;
  }
  void done() override {
    if (claimed) {
      pos = (pos + 1) % mine.size();
      ++cycle;
    }
    claimed = !claimed;
  }
  bool release_gone(const v1::Response& r) const override {
    return claimed && r.error().code() == v1::NOT_FOUND;
  }
};

// storm: one claim of one volume (alloc storm-a-<i>), never released;
// unstorm: its release.
struct storm_worker : worker {
  const options& o;
  size_t v;
  bool release;
  bool did = false;
  storm_worker(const options& o, size_t v, bool release) : o(o), v(v), release(release) {}
  v1::Request next(bool& ends_op) override {
    ends_op = true;
    v1::Request r;
    auto id = o.prefix + std::to_string(v);
    // berth keeps an alloc's node: each storm's allocs are its own.
    auto alloc = "storm-" + o.prefix + std::to_string(v) + "-" + o.alloc_tag;
    if (!release) {
      auto* c = r.mutable_volume_claim();
      c->set_volume_id(id);
      c->set_alloc_id(alloc);
      c->set_node_id(node_plugin(o, v).first);
    } else {
      auto* c = r.mutable_volume_release();
      c->set_volume_id(id);
      c->set_alloc_id(alloc);
    }
    return r;
  }
  void done() override { did = true; }
  bool finished() const override { return did; }
  bool release_gone(const v1::Response& r) const override {
    return release && r.error().code() == v1::NOT_FOUND;
  }
};

struct slot_state {
  std::unique_ptr<worker> w;
  v1::Request req;
  bool ends_op = false;
  clk::time_point op_start;
  int64_t op_start_wall_ms = 0;
  bool op_started = false;
};

struct results {
  std::vector<double> latencies;  // seconds, of measured operations
  std::vector<int64_t> acks;      // wall-clock ms of every completed op
  std::vector<std::pair<int64_t, int64_t>> spans;  // wall-clock ms: start, end of measured ops
  uint64_t ok = 0, errors = 0, abandoned = 0;
  uint64_t all_ok = 0;            // completed operations, warm-up included
  uint64_t release_gone = 0;      // releases answered NOT_FOUND, counted as done
  std::vector<std::string> gone_samples;
  std::vector<std::string> error_samples;
  double seconds = 0;
};

int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Everything one run needs, shared between main and the runner actor
// (main reads `out` only after the actor quit).
struct run_ctx {
  std::vector<slot_state> slots;
  api_actor api;
  clk::time_point measure_from, deadline;
  size_t count = 0;  // 0: run until the deadline
  clk::time_point give_up;  // abandon unfinished operations from then on (duration runs)
  bool may_give_up = false;
  bool record_acks = false;
  bool record_spans = false;
  int timeout = 30;
  results out;
};

struct runner_state {
  std::shared_ptr<run_ctx> ctx;
  size_t measured = 0, active = 0;
};

// Keeps every slot's request in flight until the deadline (or `count`
// operations) and quits.  A slot stops only between operations, so a
// claims run never leaves a claim behind.
caf::behavior runner(caf::stateful_actor<runner_state>* self, std::shared_ptr<run_ctx> ctx) {
  self->state.ctx = ctx;
  auto send_slot = [self](size_t i) {
    auto& st = self->state;
    auto& c = *st.ctx;
    auto& s = c.slots[i];
    auto now = clk::now();
    if (s.op_started && c.may_give_up && now >= c.give_up) {
      ++c.out.abandoned;  // still failing long after the end
      s.op_started = false;
    }
    if (!s.op_started) {
      bool stop = s.w->finished() || (c.count ? st.measured >= c.count : now >= c.deadline);
      if (stop) {
        if (--st.active == 0) {
          c.out.seconds = std::chrono::duration<double>(now - c.measure_from).count();
          self->quit();
        }
        return;
      }
      s.op_started = true;
      s.op_start = now;
      s.op_start_wall_ms = wall_ms();
    }
    s.req = s.w->next(s.ends_op);
    s.req.set_api_version(1);
    auto failed = [self, i](const std::string& why) {
      auto& out = self->state.ctx->out;
      ++out.errors;
      if (out.error_samples.size() < 5) out.error_samples.push_back(why);
      // The same operation again (next() repeats until done()); the retry
      // counts in the operation's latency.
      self->delayed_send(self, std::chrono::milliseconds(10), retry_atom::value, i);
    };
    self->request(c.api, std::chrono::seconds(c.timeout), api_atom::value, wrap(s.req))
        .then(
            [self, i, failed](pb<v1::Response>& r) {
              auto& st = self->state;
              auto& c = *st.ctx;
              auto& s = c.slots[i];
              if (r.msg.error().code() != v1::OK) {
                if (!s.w->release_gone(r.msg)) {
                  failed(r.msg.error().message());
                  return;
                }
                ++c.out.release_gone;
                if (c.out.gone_samples.size() < 3) c.out.gone_samples.push_back(r.msg.error().message());
              }
              s.w->done();
              if (s.ends_op) {
                s.op_started = false;
                ++c.out.all_ok;
                if (s.op_start >= c.measure_from) {
                  if (c.record_spans) c.out.spans.emplace_back(s.op_start_wall_ms, wall_ms());
                  ++c.out.ok;
                  ++st.measured;
                  c.out.latencies.push_back(
                      std::chrono::duration<double>(clk::now() - s.op_start).count());
                  if (c.record_acks) c.out.acks.push_back(wall_ms());
                }
              }
              self->send(self, retry_atom::value, i);
            },
            [failed](caf::error& e) { failed(to_failure(e).message); });
  };
  return {
      [self, send_slot](start_atom) {
        self->state.active = self->state.ctx->slots.size();
        for (size_t i = 0; i < self->state.ctx->slots.size(); ++i) send_slot(i);
      },
      [send_slot](retry_atom, size_t i) { send_slot(i); },
  };
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"berth-bench: load generator for a berthd's shell endpoint; prints one JSON line"};
  app.add_option("--address", o.address, "HOST:PORT of a berthd (any server; followers forward)");
  app.add_option("--tls-ca", o.tls.ca, "TLS: the cluster's CA (with --tls-cert and --tls-key)");
  app.add_option("--tls-cert", o.tls.cert, "TLS: a cli certificate of berth tls cert create");
  app.add_option("--tls-key", o.tls.key, "TLS: its key");
  app.add_option("--workload", o.workload, "log, claims, setup, register, storm or unstorm")
      ->check(CLI::IsMember({"log", "claims", "setup", "register", "storm", "unstorm"}));
  app.add_option("--concurrency,-c", o.concurrency, "requests (operations) in flight")
      ->check(CLI::PositiveNumber);
  app.add_option("--duration", o.duration, "seconds to measure");
  app.add_option("--count", o.count, "operations to complete instead of --duration");
  app.add_option("--warmup", o.warmup, "seconds of unmeasured load before measuring");
  app.add_option("--volumes", o.volumes, "claims/setup: volumes bench-v0..N-1");
  app.add_option("--node", o.nodes, "claims/setup: NODE=PLUGIN, volume i uses entry i mod n");
  app.add_option("--acks", o.acks, "write the wall-clock ms of every completed operation here");
  app.add_option("--timeout", o.timeout, "seconds per request");
  app.add_option("--payload", o.payload, "log: bytes of health description");
  app.add_option("--plugin", o.plugin, "register: plugin id of the volumes (must be known)");
  app.add_option("--give-up", o.give_up,
                 "abandon operations still unfinished (failing) this many seconds after the end "
                 "(0: never; not for claims, which would leave a claim)");
  app.add_option("--first", o.first, "register: first volume number (scale-vFIRST..VOLUMES-1)");
  app.add_option("--prefix", o.prefix, "claims/setup/storm/unstorm: volume ids PREFIX0..N-1");
  app.add_option("--alloc-tag", o.alloc_tag,
                 "storm/unstorm: the claims' allocs are storm-PREFIX<i>-TAG (unstorm: the storm's TAG)");
  app.add_option("--only-node", o.only_node, "claims: only the volumes of this node (see --node)");
  app.add_option("--latency-log", o.latency_log,
                 "write \"start_ms end_ms\" (wall clock) of every measured operation here");
  CLI11_PARSE(app, argc, argv);
  if (o.workload == "storm" || o.workload == "unstorm") {
    o.concurrency = o.volumes;  // every volume's request at once
    o.count = o.volumes;
    o.warmup = 0;
  }
  if (o.workload == "setup" || o.workload == "register") {
    o.count = o.workload == "setup" ? o.volumes : o.volumes - std::min(o.first, o.volumes);
    o.warmup = 0;
  }
  if (o.workload == "claims" && o.concurrency > o.volumes) {
    std::cerr << "berth-bench: --concurrency exceeds --volumes\n";
    return 2;
  }
  if (o.workload == "claims" && !o.only_node.empty()) {
    size_t mine = 0;
    for (size_t v = 0; v < o.volumes; ++v) mine += node_plugin(o, v).first == o.only_node;
    if (o.concurrency > mine) {
      std::cerr << "berth-bench: --concurrency exceeds the volumes of node " << o.only_node << "\n";
      return 2;
    }
  }

  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", size_t{1});
  // As berthd (apps/berthd/main.cpp): no 50 us idle polling, which would
  // take CPU from the cluster it measures on a 2-core machine.
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  add_message_types(cfg);
  if (auto f = tls::check_complete(o.tls, {"--tls-ca", "--tls-cert", "--tls-key"})) {
    std::cerr << "berth-bench: " << f->message << "\n";
    return 2;
  }
  tls::configure(cfg, o.tls);
  caf::actor_system sys{cfg};

  auto colon = o.address.rfind(':');
  auto api =
      tls::remote_actor<api_actor>(sys, o.address.substr(0, colon),
                                   static_cast<uint16_t>(std::stoi(o.address.substr(colon + 1))));
  if (!api) {
    std::cerr << "berth-bench: cannot reach " << o.address << ": " << sys.render(api.error()) << "\n";
    return 5;
  }

  auto ctx = std::make_shared<run_ctx>();
  ctx->api = *api;
  ctx->timeout = o.timeout;
  ctx->record_acks = !o.acks.empty();
  ctx->record_spans = !o.latency_log.empty();
  auto tag = std::to_string(::getpid()) + "." + std::to_string(wall_ms() % 100000);
  ctx->count = o.count;
  for (size_t i = 0; i < o.concurrency; ++i) {
    slot_state s;
    if (o.workload == "log")
      s.w = std::make_unique<log_worker>(i, o.payload);
    else if (o.workload == "setup")
      s.w = std::make_unique<setup_worker>(o, i, o.concurrency);
    else if (o.workload == "register")
      s.w = std::make_unique<register_worker>(o, i, o.concurrency);
    else if (o.workload == "storm" || o.workload == "unstorm")
      s.w = std::make_unique<storm_worker>(o, i, o.workload == "unstorm");
    else
      s.w = std::make_unique<claims_worker>(o, i, o.concurrency, tag);
    ctx->slots.push_back(std::move(s));
  }
  auto now = clk::now();
  ctx->measure_from = now + std::chrono::milliseconds(static_cast<int64_t>(o.warmup * 1000));
  ctx->deadline = ctx->measure_from + std::chrono::milliseconds(static_cast<int64_t>(o.duration * 1000));
  ctx->may_give_up = o.give_up > 0 && o.count == 0;
  ctx->give_up = ctx->deadline + std::chrono::milliseconds(static_cast<int64_t>(o.give_up * 1000));
  caf::anon_send(sys.spawn(runner, ctx), start_atom::value);
  sys.await_all_actors_done();
  auto& out = ctx->out;

  if (!o.acks.empty()) {
    std::ofstream f(o.acks);
    for (auto ms : out.acks) f << ms << "\n";
  }
  if (!o.latency_log.empty()) {
    std::ofstream f(o.latency_log);
    for (auto& [a, b] : out.spans) f << a << " " << b << "\n";
  }
  auto lat = out.latencies;
  auto ms = [](double s) { return s * 1000; };
  double mx = lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end());
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"workload\": \"%s\", \"concurrency\": %zu, \"ops\": %llu, \"errors\": %llu, "
                "\"seconds\": %.3f, \"ops_per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
                "\"max_ms\": %.3f",
                o.workload.c_str(), o.concurrency, static_cast<unsigned long long>(out.ok),
                static_cast<unsigned long long>(out.errors), out.seconds,
                out.seconds > 0 ? static_cast<double>(out.ok) / out.seconds : 0.0,
                ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99)), ms(mx));
  std::cout << buf;
  if (o.workload == "log") std::cout << ", \"entry_bytes\": " << log_entry_bytes(o.payload);
  std::cout << ", \"abandoned\": " << out.abandoned;
  std::cout << ", \"ops_all\": " << out.all_ok;
  std::cout << ", \"release_gone\": " << out.release_gone;
  auto samples = [](const char* name, const std::vector<std::string>& v) {
    std::cout << ", \"" << name << "\": [";
    for (size_t i = 0; i < v.size(); ++i) {
      std::string s;
      for (char c : v[i])
        if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) s += c;
      std::cout << (i ? ", " : "") << "\"" << s << "\"";
    }
    std::cout << "]";
  };
  samples("error_samples", out.error_samples);
  samples("release_gone_samples", out.gone_samples);
  std::cout << "}" << std::endl;
  return 0;
}
