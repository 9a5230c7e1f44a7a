#include "actors/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "messages/model.hpp"

namespace berth {

namespace {

using prometheus::Labels;

// A gauge family whose series are addressed by label values.
struct gauges {
  prometheus::Family<prometheus::Gauge>& family;
  std::vector<prometheus::Gauge*> series = {};
  prometheus::Gauge& at(const Labels& labels) {
    auto& g = family.Add(labels);
    if (std::find(series.begin(), series.end(), &g) == series.end()) series.push_back(&g);
    return g;
  }
  void add(const Labels& labels, double delta) { at(labels).Increment(delta); }
  void set(const Labels& labels, double value) { at(labels).Set(value); }
  void zero() {
    for (auto* g : series) g->Set(0);
  }
};

// The volumes' health series ({namespace, volume, node}) of
// berth_volume_abnormal, berth_volume_capacity_bytes and
// berth_volume_used_bytes, kept by volume in a map and rendered at each
// scrape: replacing or removing one volume's series costs O(log volumes).
// (prometheus-cpp's Family::Remove is linear in the family's series: with a
// series per volume, the first health check of 95,000 volumes, which
// replaced each volume's series, kept the leader busy for minutes until it
// lost the leadership.)
class health_collector final : public prometheus::Collectable {
 public:
  void set(const std::pair<std::string, std::string>& volume, std::vector<health_series> rows) {
    std::lock_guard<std::mutex> guard(mtx_);
    if (rows.empty())
      rows_.erase(volume);
    else
      rows_[volume] = std::move(rows);
  }
  void clear() {
    std::lock_guard<std::mutex> guard(mtx_);
    rows_.clear();
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    auto family = [](const char* name, const char* help) {
      prometheus::MetricFamily f;
      f.name = name;
      f.help = help;
      f.type = prometheus::MetricType::Gauge;
      return f;
    };
    auto abnormal = family("berth_volume_abnormal",
                           "1 while a volume's condition is abnormal: node \"\" is the "
                           "controller's health check, a node the node plugin's "
                           "NodeGetVolumeStats (leader only)");
    auto capacity = family("berth_volume_capacity_bytes",
                           "A volume's capacity on a node, as the node's plugin reported it "
                           "(NodeGetVolumeStats; leader only)");
    auto used = family("berth_volume_used_bytes",
                       "Bytes used in a volume on a node, as the node's plugin reported it "
                       "(NodeGetVolumeStats; leader only)");
    std::lock_guard<std::mutex> guard(mtx_);
    for (const auto& [volume, rows] : rows_)
      for (const auto& r : rows) {
        prometheus::ClientMetric m;
        m.label = {{"namespace", volume.first}, {"node", r.node}, {"volume", volume.second}};
        m.gauge.value = r.abnormal ? 1 : 0;
        abnormal.metric.push_back(m);
        if (!r.has_usage) continue;
        m.gauge.value = static_cast<double>(r.capacity_bytes);
        capacity.metric.push_back(m);
        m.gauge.value = static_cast<double>(r.used_bytes);
        used.metric.push_back(std::move(m));
      }
    return {std::move(abnormal), std::move(capacity), std::move(used)};
  }

 private:
  mutable std::mutex mtx_;
  std::map<std::pair<std::string, std::string>, std::vector<health_series>> rows_;
};

// What /metrics serves: the registry's families and the health series.
class all_series final : public prometheus::Collectable {
 public:
  all_series(std::shared_ptr<prometheus::Registry> registry,
             std::shared_ptr<health_collector> health)
      : registry_(std::move(registry)), health_(std::move(health)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    auto out = registry_->Collect();
    for (auto& f : health_->Collect()) out.push_back(std::move(f));
    return out;
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<health_collector> health_;
};

const char* volume_state(const v1::Volume& v) {
  bool releasing = false, taken = false;
  for (const auto& c : v.claims()) {
    taken |= c.state() == v1::CLAIM_TAKEN;
    releasing |= c.state() != v1::CLAIM_TAKEN;
  }
  return releasing ? "releasing" : taken ? "claimed" : "unclaimed";
}

class prometheus_metrics final : public metrics {
 public:
  prometheus_metrics()
      : registry_(std::make_shared<prometheus::Registry>()),
        volumes_{prometheus::BuildGauge()
                     .Name("berth_volumes")
                     .Help("Registered volumes by state (unclaimed, claimed, releasing)")
                     .Register(*registry_)},
        claims_{
            prometheus::BuildGauge()
                .Name("berth_claims")
                .Help("Volume claims by mode (read, write) and state (taken, unpublishing, ...)")
                .Register(*registry_)},
        plugin_controllers_healthy_{prometheus::BuildGauge()
                                        .Name("berth_plugin_controllers_healthy")
                                        .Help("Healthy controller instances by plugin")
                                        .Register(*registry_)},
        plugin_controllers_expected_{prometheus::BuildGauge()
                                         .Name("berth_plugin_controllers_expected")
                                         .Help("Known controller instances by plugin")
                                         .Register(*registry_)},
        plugin_nodes_healthy_{prometheus::BuildGauge()
                                  .Name("berth_plugin_nodes_healthy")
                                  .Help("Healthy node instances by plugin")
                                  .Register(*registry_)},
        plugin_nodes_expected_{prometheus::BuildGauge()
                                   .Name("berth_plugin_nodes_expected")
                                   .Help("Known node instances by plugin")
                                   .Register(*registry_)},
        actors_{prometheus::BuildGauge()
                    .Name("berth_actors")
                    .Help("Running actors by kind")
                    .Register(*registry_)},
        log_index_(prometheus::BuildGauge()
                       .Name("berth_log_last_index")
                       .Help("Index of the last durable log entry")
                       .Register(*registry_)
                       .Add({})),
        applied_index_(prometheus::BuildGauge()
                           .Name("berth_state_applied_index")
                           .Help("Index of the last entry applied to the state tables")
                           .Register(*registry_)
                           .Add({})),
        log_entries_(prometheus::BuildCounter()
                         .Name("berth_log_entries_total")
                         .Help("Entries written durably to the log")
                         .Register(*registry_)
                         .Add({})),
        log_write_seconds_(
            prometheus::BuildHistogram()
                .Name("berth_log_write_seconds")
                .Help("Duration of one durable log write (transaction and fsync)")
                .Register(*registry_)
                .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005, 0.01,
                                                                 0.025, 0.05, 0.1, 0.25, 0.5, 1})),
        log_batch_entries_(
            prometheus::BuildHistogram()
                .Name("berth_log_batch_entries")
                .Help("Entries per durable log write (group commit)")
                .Register(*registry_)
                .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256,
                                                                 512, 1024})),
        snapshots_(prometheus::BuildCounter()
                       .Name("berth_raft_snapshots_total")
                       .Help("Raft snapshots taken or installed by this server")
                       .Register(*registry_)
                       .Add({})),
        snapshot_index_(prometheus::BuildGauge()
                            .Name("berth_raft_snapshot_index")
                            .Help("Index of this server's latest Raft snapshot")
                            .Register(*registry_)
                            .Add({})),
        raft_term_(prometheus::BuildGauge()
                       .Name("berth_raft_term")
                       .Help("This server's Raft term")
                       .Register(*registry_)
                       .Add({})),
        raft_leader_(prometheus::BuildGauge()
                         .Name("berth_raft_leader")
                         .Help("1 while this server is the Raft leader, else 0")
                         .Register(*registry_)
                         .Add({})),
        raft_commit_(prometheus::BuildGauge()
                         .Name("berth_raft_commit_index")
                         .Help("This server's Raft commit index")
                         .Register(*registry_)
                         .Add({})),
        raft_log_entries_(prometheus::BuildGauge()
                              .Name("berth_raft_log_entries")
                              .Help("Entries kept in the Raft log (after compaction)")
                              .Register(*registry_)
                              .Add({})),
        csi_calls_(prometheus::BuildCounter()
                       .Name("berth_csi_calls_total")
                       .Help("CSI calls to plugins by plugin, method and gRPC code")
                       .Register(*registry_)),
        csi_call_seconds_(prometheus::BuildHistogram()
                              .Name("berth_csi_call_seconds")
                              .Help("Duration of CSI calls by plugin and method")
                              .Register(*registry_)),
        csi_in_flight_{prometheus::BuildGauge()
                           .Name("berth_csi_calls_in_flight")
                           .Help("CSI calls in flight on this node's plugin connection, by plugin "
                                 "and kind (controller, node)")
                           .Register(*registry_)},
        csi_call_limit_{prometheus::BuildGauge()
                            .Name("berth_csi_call_limit")
                            .Help("CSI calls allowed in flight per plugin and kind: the "
                                  "configured max_*_calls, halved while the plugin answers "
                                  "RESOURCE_EXHAUSTED or ABORTED")
                            .Register(*registry_)},
        plugin_operations_{prometheus::BuildGauge()
                               .Name("berth_plugin_operations")
                               .Help("The leader's claims and releases of a plugin's volumes, by "
                                     "plugin, kind (claim, release) and state: running (routed "
                                     "to the volume actors) or queued (waiting for room in the "
                                     "plugin's window, berthd --plugin-window)")
                               .Register(*registry_)},
        csi_backoffs_(prometheus::BuildCounter()
                          .Name("berth_csi_call_backoffs_total")
                          .Help("CSI calls queued again after RESOURCE_EXHAUSTED or ABORTED, by "
                                "plugin")
                          .Register(*registry_)),
        claim_seconds_(
            prometheus::BuildHistogram()
                .Name("berth_claim_seconds")
                .Help("Time to answer a successful claim (commit, controller and node "
                      "publish)")
                .Register(*registry_)
                .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                                                 10, 30})),
        requests_(prometheus::BuildCounter()
                      .Name("berth_requests_total")
                      .Help("Shell commands served, by command and outcome")
                      .Register(*registry_)),
        request_seconds_(prometheus::BuildHistogram()
                             .Name("berth_request_seconds")
                             .Help("Time to serve a shell command, by command")
                             .Register(*registry_)),
        volume_actor_events_(prometheus::BuildCounter()
                                 .Name("berth_volume_actor_events_total")
                                 .Help("Volume actors started for a request and stopped when "
                                       "idle, and requests that waited for a stop (leader only)")
                                 .Register(*registry_)),
        watcher_retries_(prometheus::BuildCounter()
                             .Name("berth_watcher_retries_total")
                             .Help("Release steps the volume watcher retried after a failure")
                             .Register(*registry_)
                             .Add({})),
        writes_refused_(prometheus::BuildCounter()
                            .Name("berth_leader_writes_refused_total")
                            .Help("The leader's writes of allocs, nodes and ACLs refused at "
                                  "apply because an object they change changed since they were "
                                  "built (compare-and-set), each built again (leader only)")
                            .Register(*registry_)
                            .Add({})),
        client_db_writes_(prometheus::BuildCounter()
                              .Name("berth_client_db_writes_total")
                              .Help("Publication records this client wrote to client.db (each "
                                    "before its CSI call or its answer; clients only)")
                              .Register(*registry_)
                              .Add({})),
        client_db_commits_(prometheus::BuildCounter()
                               .Name("berth_client_db_commits_total")
                               .Help("Transactions (one fsync each) those records were written "
                                     "in: the node's group commit (clients only)")
                               .Register(*registry_)
                               .Add({})),
        client_db_commit_seconds_(
            prometheus::BuildHistogram()
                .Name("berth_client_db_commit_seconds")
                .Help("Duration of one of those transactions, fsync included (clients only)")
                .Register(*registry_)
                .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005, 0.01,
                                                                 0.025, 0.05, 0.1, 0.25, 0.5, 1})),
        placements_(prometheus::BuildCounter()
                        .Name("berth_placements_total")
                        .Help("Allocs run without --node, by result: placed, none (no node "
                              "fits) or explained (--explain; leader only)")
                        .Register(*registry_)),
        watcher_pending_(prometheus::BuildGauge()
                             .Name("berth_watcher_pending_releases")
                             .Help("Claims the volume watcher is releasing (leader only)")
                             .Register(*registry_)
                             .Add({})),
        allocs_{prometheus::BuildGauge()
                    .Name("berth_allocs")
                    .Help("Allocs by state (leader only)")
                    .Register(*registry_)},
        mailbox_{prometheus::BuildGauge()
                     .Name("berth_mailbox_backlog")
                     .Help("Messages waiting in an actor's mailbox, by actor kind (sampled by "
                           "the actor on its timer)")
                     .Register(*registry_)},
        nodes_{prometheus::BuildGauge()
                   .Name("berth_nodes")
                   .Help("Nodes by status (leader only)")
                   .Register(*registry_)},
        health_(std::make_shared<health_collector>()),
        all_(std::make_shared<all_series>(registry_, health_)) {}

  void clear_state() override {
    std::lock_guard<std::mutex> guard(mtx_);
    for (auto* g :
         {&volumes_, &claims_, &plugin_controllers_healthy_, &plugin_controllers_expected_,
          &plugin_nodes_healthy_, &plugin_nodes_expected_, &actors_})
      g->zero();
    health_->clear();
  }

  void volume_changed(const v1::Volume* before, const v1::Volume* after) override {
    std::lock_guard<std::mutex> guard(mtx_);
    auto count = [&](const v1::Volume& v, double sign) {
      volumes_.add({{"state", volume_state(v)}}, sign);
      for (const auto& c : v.claims())
        claims_.add(
            {{"mode", std::string(name_of(c.mode()))}, {"state", std::string(name_of(c.state()))}},
            sign);
    };
    if (before) count(*before, -1);
    if (after) count(*after, +1);
  }

  void volumes_unclaimed(int64_t count) override {
    std::lock_guard<std::mutex> guard(mtx_);
    volumes_.add({{"state", "unclaimed"}}, static_cast<double>(count));
  }

  void volume_health(const std::string& ns, const std::string& volume,
                     const std::vector<health_series>& rows) override {
    health_->set({ns, volume}, rows);
  }

  void plugin_changed(const v1::Plugin*, const v1::Plugin* after) override {
    if (!after) return;
    std::lock_guard<std::mutex> guard(mtx_);
    auto h = health_of(*after);
    Labels l{{"plugin", after->id()}};
    plugin_controllers_healthy_.set(l, h.controllers_healthy);
    plugin_controllers_expected_.set(l, h.controllers_expected);
    plugin_nodes_healthy_.set(l, h.nodes_healthy);
    plugin_nodes_expected_.set(l, h.nodes_expected);
  }

  void log_written(size_t entries, uint64_t last_index, double seconds) override {
    log_entries_.Increment(static_cast<double>(entries));
    log_index_.Set(static_cast<double>(last_index));
    log_write_seconds_.Observe(seconds);
    log_batch_entries_.Observe(static_cast<double>(entries));
  }

  void restored(uint64_t last_index, uint64_t applied_index) override {
    log_index_.Set(static_cast<double>(last_index));
    applied_index_.Set(static_cast<double>(applied_index));
  }

  void snapshot_taken(uint64_t index) override {
    snapshots_.Increment();
    snapshot_index_.Set(static_cast<double>(index));
  }

  void raft_state(uint64_t term, bool leader, uint64_t commit, uint64_t log_entries) override {
    raft_term_.Set(static_cast<double>(term));
    raft_leader_.Set(leader ? 1 : 0);
    raft_commit_.Set(static_cast<double>(commit));
    raft_log_entries_.Set(static_cast<double>(log_entries));
  }

  void applied(uint64_t index) override { applied_index_.Set(static_cast<double>(index)); }

  void request_done(const std::string& command, const std::string& outcome,
                    double seconds) override {
    requests_.Add({{"command", command}, {"outcome", outcome}}).Increment();
    request_seconds_
        .Add({{"command", command}},
             prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})
        .Observe(seconds);
  }

  void csi_call(const std::string& plugin, const std::string& method, const std::string& code,
                double seconds) override {
    csi_calls_.Add({{"plugin", plugin}, {"method", method}, {"code", code}}).Increment();
    csi_call_seconds_
        .Add({{"plugin", plugin}, {"method", method}},
             prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})
        .Observe(seconds);
  }

  void csi_calls_in_flight(const std::string& plugin, const std::string& kind, size_t in_flight,
                           size_t limit) override {
    std::lock_guard<std::mutex> guard(mtx_);
    csi_in_flight_.set({{"plugin", plugin}, {"kind", kind}}, static_cast<double>(in_flight));
    csi_call_limit_.set({{"plugin", plugin}, {"kind", kind}}, static_cast<double>(limit));
  }

  void plugin_operations(const std::string& plugin, const std::string& kind, size_t running,
                         size_t queued) override {
    std::lock_guard<std::mutex> guard(mtx_);
    plugin_operations_.set({{"plugin", plugin}, {"kind", kind}, {"state", "running"}},
                           static_cast<double>(running));
    plugin_operations_.set({{"plugin", plugin}, {"kind", kind}, {"state", "queued"}},
                           static_cast<double>(queued));
  }

  void csi_call_backoff(const std::string& plugin) override {
    csi_backoffs_.Add({{"plugin", plugin}}).Increment();
  }

  void claim_done(double seconds) override { claim_seconds_.Observe(seconds); }

  void actors(const std::string& kind, size_t count) override {
    std::lock_guard<std::mutex> guard(mtx_);
    actors_.set({{"kind", kind}}, static_cast<double>(count));
  }

  void volume_actor_event(const std::string& event) override {
    std::lock_guard<std::mutex> guard(mtx_);
    volume_actor_events_.Add({{"event", event}}).Increment();
  }
  void watcher_retry() override { watcher_retries_.Increment(); }
  void write_refused() override { writes_refused_.Increment(); }
  void client_db_written(size_t writes, double seconds) override {
    client_db_writes_.Increment(static_cast<double>(writes));
    client_db_commits_.Increment();
    client_db_commit_seconds_.Observe(seconds);
  }
  void placement(const std::string& result) override {
    std::lock_guard<std::mutex> guard(mtx_);
    placements_.Add({{"result", result}}).Increment();
  }
  void mailbox(const std::string& kind, size_t backlog) override {
    std::lock_guard<std::mutex> guard(mtx_);
    mailbox_.set({{"kind", kind}}, static_cast<double>(backlog));
  }
  void watcher_pending(size_t count) override { watcher_pending_.Set(static_cast<double>(count)); }
  void allocs(const std::string& state, size_t count) override {
    std::lock_guard<std::mutex> guard(mtx_);
    allocs_.set({{"state", state}}, static_cast<double>(count));
  }
  void nodes(const std::string& status, size_t count) override {
    std::lock_guard<std::mutex> guard(mtx_);
    nodes_.set({{"status", status}}, static_cast<double>(count));
  }

  std::shared_ptr<prometheus::Collectable> registry() override { return all_; }

 private:
  std::mutex mtx_;
  std::shared_ptr<prometheus::Registry> registry_;
  gauges volumes_;
  gauges claims_;
  gauges plugin_controllers_healthy_;
  gauges plugin_controllers_expected_;
  gauges plugin_nodes_healthy_;
  gauges plugin_nodes_expected_;
  gauges actors_;
  prometheus::Gauge& log_index_;
  prometheus::Gauge& applied_index_;
  prometheus::Counter& log_entries_;
  prometheus::Histogram& log_write_seconds_;
  prometheus::Histogram& log_batch_entries_;
  prometheus::Counter& snapshots_;
  prometheus::Gauge& snapshot_index_;
  prometheus::Gauge& raft_term_;
  prometheus::Gauge& raft_leader_;
  prometheus::Gauge& raft_commit_;
  prometheus::Gauge& raft_log_entries_;
  prometheus::Family<prometheus::Counter>& csi_calls_;
  prometheus::Family<prometheus::Histogram>& csi_call_seconds_;
  gauges csi_in_flight_;
  gauges csi_call_limit_;
  gauges plugin_operations_;
  prometheus::Family<prometheus::Counter>& csi_backoffs_;
  prometheus::Histogram& claim_seconds_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_seconds_;
  prometheus::Family<prometheus::Counter>& volume_actor_events_;
  prometheus::Counter& watcher_retries_;
  prometheus::Counter& writes_refused_;
  prometheus::Counter& client_db_writes_;
  prometheus::Counter& client_db_commits_;
  prometheus::Histogram& client_db_commit_seconds_;
  prometheus::Family<prometheus::Counter>& placements_;
  prometheus::Gauge& watcher_pending_;
  gauges allocs_;
  gauges mailbox_;
  gauges nodes_;
  std::shared_ptr<health_collector> health_;
  std::shared_ptr<all_series> all_;
};

}  // namespace

std::shared_ptr<metrics> make_metrics() {
  return std::make_shared<prometheus_metrics>();
}

}  // namespace berth
