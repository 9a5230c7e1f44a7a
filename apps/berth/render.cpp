#include "apps/berth/render.hpp"

#include <algorithm>
#include <map>

#include "messages/model.hpp"

namespace berth {

std::string render_table(const table& t) {
  std::vector<size_t> width(t.header.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
  };
  measure(t.header);
  for (const auto& r : t.rows) measure(r);
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    std::string l;
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      l += row[i];
      if (i + 1 < row.size()) l += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += l + "\n";
  };
  line(t.header);
  for (const auto& r : t.rows) line(r);
  return out;
}

std::string relative_time(int64_t then_ms, int64_t now_ms) {
  if (then_ms <= 0) return "-";
  int64_t s = std::max<int64_t>(0, (now_ms - then_ms) / 1000);
  if (s < 60) return std::to_string(s) + "s ago";
  if (s < 3600) return std::to_string(s / 60) + "m ago";
  if (s < 86400) return std::to_string(s / 3600) + "h ago";
  return std::to_string(s / 86400) + "d ago";
}

namespace {

std::string yes_no(bool b) { return b ? "yes" : "no"; }

// The items' texts, `sep` between them.  A separator follows an empty first
// text only once the joined text is not empty (as the loops this replaced).
template <class Items, class Text>
std::string join(const Items& items, const char* sep, Text text) {
  std::string out;
  for (const auto& x : items) out += (out.empty() ? "" : sep) + text(x);
  return out;
}

template <class Strings>
std::string join(const Strings& items, const char* sep) {
  return join(items, sep, [](const std::string& s) { return s; });
}

std::string join_map(const google::protobuf::Map<std::string, std::string>& m) {
  std::map<std::string, std::string> sorted(m.begin(), m.end());
  auto out = join(sorted, ", ", [](const auto& kv) { return kv.first + "=" + kv.second; });
  return out.empty() ? "-" : out;
}

// When the node was last heard of: its client, else its heartbeat.
int64_t last_seen(const v1::Node& n) {
  return n.last_seen_ms() ? n.last_seen_ms() : n.last_heartbeat_ms();
}

std::string bytes(int64_t n) {
  if (n <= 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(n);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof buf, v == static_cast<int64_t>(v) ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string claims_summary(const v1::Volume& v) {
  int r = 0, w = 0, releasing = 0;
  for (const auto& c : v.claims()) {
    if (c.state() != v1::CLAIM_TAKEN)
      ++releasing;
    else
      (c.mode() == v1::CLAIM_WRITE ? w : r)++;
  }
  std::string s = std::to_string(w) + " write, " + std::to_string(r) + " read";
  if (releasing) s += ", " + std::to_string(releasing) + " releasing";
  return s;
}

std::string details(const std::vector<std::pair<std::string, std::string>>& kv) {
  size_t w = 0;
  for (const auto& [k, _] : kv) w = std::max(w, k.size());
  std::string out;
  for (const auto& [k, v] : kv) out += k + std::string(w - k.size(), ' ') + " = " + v + "\n";
  return out;
}

std::string health(const v1::Volume& v, const v1::Plugin* p) {
  auto why = volume_unhealthy(v, p);
  return why ? "no (" + *why + ")" : "yes";
}

}  // namespace

std::string render_volume_list(const v1::Response& r, int64_t now_ms) {
  if (r.volumes().empty()) return "No volumes registered.\n";
  table t{{"ID", "NAMESPACE", "PLUGIN", "ACCESS MODE", "HEALTHY", "CLAIMS"}, {}};
  for (const auto& v : r.volumes()) {
    auto mode = mode_in_use(v);
    std::string access = mode == v1::ACCESS_MODE_UNKNOWN
                             ? (v.capabilities().empty()
                                    ? "-"
                                    : std::string(name_of(v.capabilities(0).access_mode())))
                             : std::string(name_of(mode));
    t.rows.push_back({v.id(), v.namespace_(), v.plugin_id(), access,
                      yes_no(!volume_unhealthy(v, plugin_in(r, v.plugin_id()))),
                      claims_summary(v)});
  }
  return render_table(t);
}

// active, or pause/drain with what it means.
static std::string availability_text(const v1::Volume& v) {
  switch (v.availability()) {
    case v1::VOLUME_PAUSE: return "pause (new claims refused)";
    case v1::VOLUME_DRAIN:
      return "drain (new claims refused; allocs using it stopped, claims released)";
    default: return "active";
  }
}

std::string render_volume(const v1::Volume& v, const v1::Plugin* p, int64_t now_ms) {
  auto caps = join(v.capabilities(), ", ", [](const v1::VolumeCapability& c) {
    return std::string(name_of(c.access_mode())) + "/" + std::string(name_of(c.attachment_mode()));
  });
  auto in_use = mode_in_use(v);
  std::string out = details({
      {"ID", v.id()},
      {"Name", v.name()},
      {"Namespace", v.namespace_()},
      {"Plugin ID", v.plugin_id()},
      {"External ID", v.external_id()},
      {"Group", v.group().empty() ? "-" : v.group()},
      {"Healthy", health(v, p)},
      {"Availability", availability_text(v)},
      {"Condition", v.condition().abnormal()
                        ? "abnormal: " + (v.condition().message().empty()
                                              ? std::string("(no message)")
                                              : v.condition().message()) +
                              " (since " + relative_time(v.condition().since_ms(), now_ms) +
                              "; new claims need --allow-abnormal)"
                        : std::string("ok")},
      {"Capabilities", caps},
      {"Access Mode",
       in_use == v1::ACCESS_MODE_UNKNOWN ? "- (no claims)" : std::string(name_of(in_use))},
      {"Capacity", "min " + bytes(v.capacity_min()) + ", max " + bytes(v.capacity_max()) +
                       ", reported " + bytes(v.capacity_bytes())},
      {"Filesystem", v.mount_options().fs_type().empty() ? "-" : v.mount_options().fs_type()},
      {"Parameters", join_map(v.parameters())},
      {"Context", join_map(v.context())},
      {"Claims", claims_summary(v)},
  });
  // Where the content came from (volume create), what volume modify set.
  std::vector<std::pair<std::string, std::string>> more;
  if (!v.snapshot_id().empty()) more.push_back({"Snapshot ID", v.snapshot_id()});
  if (!v.clone_id().empty()) more.push_back({"Clone ID", v.clone_id()});
  if (!v.modified_parameters().empty())
    more.push_back({"Mutable Parameters", join_map(v.modified_parameters())});
  if (v.has_expansion() && v.expansion().required_bytes() > 0) {
    const auto& e = v.expansion();
    std::string nodes;
    for (const auto& n : e.nodes_done()) nodes += (nodes.empty() ? "" : ", ") + n;
    more.push_back({"Expansion", "to " + bytes(e.required_bytes()) + ": ControllerExpandVolume " +
                                     (e.controller_done() ? "done" : "pending") +
                                     (e.node_required() ? ", NodeExpandVolume done on " +
                                                              (nodes.empty() ? "-" : nodes)
                                                        : std::string())});
  }
  if (!more.empty()) out += details(more);
  if (p != nullptr) {
    auto h = health_of(*p);
    out += "\nPlugin\n" + details({{"Controllers Healthy", std::to_string(h.controllers_healthy) + "/" +
                                                               std::to_string(h.controllers_expected)},
                                   {"Nodes Healthy", std::to_string(h.nodes_healthy) + "/" +
                                                         std::to_string(h.nodes_expected)}});
  }
  if (!v.claims().empty()) {
    table t{{"ALLOC", "NODE", "MODE", "STATE", "CLAIMED", "RELEASED"}, {}};
    for (const auto& c : v.claims())
      t.rows.push_back({c.alloc_id(), c.node_id(), std::string(name_of(c.mode())),
                        std::string(name_of(c.state())), relative_time(c.claimed_at_ms(), now_ms),
                        relative_time(c.released_at_ms(), now_ms)});
    out += "\nClaims\n" + render_table(t);
    // What the volume watcher is doing about claims in release.
    table w{{"ALLOC", "RELEASE STEP", "ATTEMPTS", "NEXT RETRY", "LAST ERROR"}, {}};
    for (const auto& c : v.claims()) {
      if (c.state() == v1::CLAIM_TAKEN) continue;
      std::string next = "-";
      if (c.release_next_retry_ms() > now_ms)
        next = "in " + std::to_string((c.release_next_retry_ms() - now_ms + 999) / 1000) + "s";
      w.rows.push_back({c.alloc_id(), std::string(name_of(c.state())),
                        std::to_string(c.release_attempts()), next,
                        c.release_error().empty() ? "-" : c.release_error()});
    }
    if (!w.rows.empty()) out += "\nReleases (volume watcher)\n" + render_table(w);
  }
  if (!v.usage().empty()) {
    // What each node's plugin reported (NodeGetVolumeStats).
    table u{{"NODE", "CAPACITY", "USED", "AVAILABLE", "CONDITION", "UPDATED"}, {}};
    for (const auto& x : v.usage())
      u.rows.push_back({x.node_id(), bytes(x.capacity_bytes()), bytes(x.used_bytes()),
                        bytes(x.available_bytes()),
                        !x.condition_reported() ? "-"
                        : x.abnormal()          ? "abnormal: " + x.message()
                                                : "ok",
                        relative_time(x.updated_at_ms(), now_ms)});
    out += "\nUsage\n" + render_table(u);
  }
  return out;
}

std::string render_plugin_list(const v1::Response& r) {
  if (r.plugins().empty()) return "No plugins registered.\n";
  table t{{"ID", "PROVIDER", "VERSION", "CONTROLLERS HEALTHY/EXPECTED", "NODES HEALTHY/EXPECTED"}, {}};
  for (const auto& p : r.plugins()) {
    auto h = health_of(p);
    t.rows.push_back({p.id(), p.provider().empty() ? "-" : p.provider(),
                      p.provider_version().empty() ? "-" : p.provider_version(),
                      std::to_string(h.controllers_healthy) + "/" + std::to_string(h.controllers_expected),
                      std::to_string(h.nodes_healthy) + "/" + std::to_string(h.nodes_expected)});
  }
  return render_table(t);
}

std::string render_plugin(const v1::Plugin& p, int64_t now_ms) {
  auto h = health_of(p);
  std::string out = details({
      {"ID", p.id()},
      {"Provider", p.provider().empty() ? "-" : p.provider()},
      {"Version", p.provider_version().empty() ? "-" : p.provider_version()},
      {"Controller Required", yes_no(p.controller_required())},
      {"Controllers Healthy", std::to_string(h.controllers_healthy) + "/" + std::to_string(h.controllers_expected)},
      {"Nodes Healthy", std::to_string(h.nodes_healthy) + "/" + std::to_string(h.nodes_expected)},
  });
  auto instances = [&](const char* title, const auto& list) {
    if (list.empty()) return;
    table t{{"NODE", "HEALTHY", "CSI NODE ID", "UPDATED", "DESCRIPTION"}, {}};
    for (const auto& i : list)
      t.rows.push_back({i.node_id(), yes_no(i.healthy()), i.csi_node_id().empty() ? "-" : i.csi_node_id(),
                        relative_time(i.updated_at_ms(), now_ms),
                        i.health_description().empty() ? "-" : i.health_description()});
    out += std::string("\n") + title + "\n" + render_table(t);
  };
  instances("Controllers", p.controllers());
  instances("Nodes", p.nodes());
  return out;
}

// A node's eligibility, with its drain: "eligible", "ineligible",
// "draining", "drained".
std::string eligibility_of(const v1::Node& n) {
  if (n.has_drain()) return "draining";
  if (!n.ineligible()) return "eligible";
  return n.drained_at_ms() > 0 ? "drained" : "ineligible";
}

std::string in_time(int64_t then_ms, int64_t now_ms) {
  int64_t s = std::max<int64_t>(0, (then_ms - now_ms + 999) / 1000);
  if (s < 60) return "in " + std::to_string(s) + "s";
  if (s < 3600) return "in " + std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  return "in " + std::to_string(s / 3600) + "h" + std::to_string(s % 3600 / 60) + "m";
}

// What a draining node waits for, and until when.
std::string drain_text(const v1::Node& n, int64_t now_ms) {
  const auto& d = n.drain();
  const auto& p = n.drain_progress();
  std::string out = std::to_string(p.allocs_left()) + " alloc(s) to stop, " +
                    std::to_string(p.claims_left()) + " claim(s) to release; ";
  if (d.forced())
    out += "deadline passed: releasing without the node";
  else if (d.deadline_ms() == 0)
    out += "no deadline";
  else
    out += "deadline " + in_time(d.deadline_ms(), now_ms);
  out += "; started " + relative_time(d.started_at_ms(), now_ms);
  if (d.keep_plugins()) out += "; keeps its plugins";
  return out;
}

std::string render_node_list(const v1::Response& r, int64_t now_ms) {
  if (r.nodes().empty()) return "No nodes known.\n";
  table t{{"ID", "STATUS", "ELIGIBILITY", "CLIENT", "PLUGINS", "LAST SEEN"}, {}};
  for (const auto& n : r.nodes()) {
    auto plugins = join(n.plugin_ids(), ",");
    t.rows.push_back({n.id(), std::string(name_of(n.status())), eligibility_of(n),
                      n.has_client() ? "yes" : "no", plugins.empty() ? "-" : plugins,
                      relative_time(last_seen(n), now_ms)});
  }
  return render_table(t);
}

std::string render_node(const v1::Response& r, int64_t now_ms) {
  if (r.nodes().empty()) return "";
  const auto& n = r.nodes(0);
  auto plugins = join(n.plugin_ids(), ", ");
  std::vector<std::pair<std::string, std::string>> rows{
      {"ID", n.id()},
      {"Status", std::string(name_of(n.status()))},
      {"Eligibility", eligibility_of(n)},
      {"Plugins", plugins.empty()           ? "-"
                  : n.plugins_withdrawn() ? plugins + " (withdrawn by the drain)"
                                          : plugins},
      {"Client", n.has_client() ? "yes" : "no"},
      {"Last Seen", relative_time(last_seen(n), now_ms)}};
  if (n.has_drain()) rows.insert(rows.begin() + 3, {"Drain", drain_text(n, now_ms)});
  if (!n.has_drain() && n.drained_at_ms() > 0)
    rows.insert(rows.begin() + 3, {"Drained", relative_time(n.drained_at_ms(), now_ms)});
  std::string out = details(rows);
  if (!r.allocs().empty()) {
    table a{{"ALLOC", "STATE", "VOLUMES", "MODIFIED"}, {}};
    for (const auto& x : r.allocs()) {
      auto vols = join(x.volumes(), ",", [](const v1::AllocVolume& v) { return v.volume_id(); });
      a.rows.push_back({x.id(), std::string(name_of(x.state())), vols.empty() ? "-" : vols,
                        relative_time(x.modified_at_ms(), now_ms)});
    }
    out += "\nAllocs\n" + render_table(a);
  }
  if (r.volumes().empty()) return out + "\nNo volumes claimed on this node.\n";
  table t{{"VOLUME", "NAMESPACE", "ALLOC", "MODE", "STATE"}, {}};
  for (const auto& v : r.volumes())
    for (const auto& c : v.claims())
      if (c.node_id() == n.id())
        t.rows.push_back({v.id(), v.namespace_(), c.alloc_id(), std::string(name_of(c.mode())),
                          std::string(name_of(c.state()))});
  return out + "\nVolumes\n" + render_table(t);
}

std::string render_agent(const v1::AgentStatus& a) {
  return details({
      {"Node", a.node_name().empty() ? "-" : a.node_name()},
      {"Leader", yes_no(a.leader())},
      {"Leader Address", a.leader_address().empty() ? "-" : a.leader_address()},
      {"Version", a.version().empty() ? "-" : a.version()},
  });
}

std::string render_raft_peers(const v1::Response& r) {
  uint64_t leader = 0;
  for (const auto& s : r.raft())
    if (s.role() == "leader") leader = s.server().raft_id();
  table t{{"NAME", "ID", "ADDRESS", "ROLE", "TERM", "LAST INDEX", "APPLIED INDEX"}, {}};
  for (const auto& s : r.raft()) {
    char id[20];
    snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(s.server().raft_id()));
    std::string role = s.role();
    if (role == "unreachable" && !s.error().empty()) role += " (" + s.error() + ")";
    t.rows.push_back({s.server().name(), id, s.server().raft_address().empty() ? "-" : s.server().raft_address(),
                      role, s.role() == "unreachable" ? "-" : std::to_string(s.term()),
                      s.role() == "unreachable" ? "-" : std::to_string(s.last_index()),
                      s.role() == "unreachable" ? "-" : std::to_string(s.applied_index())});
  }
  std::string out = render_table(t);
  if (leader == 0) out += "No leader right now.\n";
  return out;
}

std::string render_alloc_list(const v1::Response& r, int64_t now_ms) {
  if (r.allocs().empty()) return "No allocs.\n";
  table t{{"ID", "NAMESPACE", "NODE", "GROUP", "STATE", "VOLUMES", "MODIFIED"}, {}};
  for (const auto& a : r.allocs()) {
    auto vols = join(a.volumes(), ",", [](const v1::AllocVolume& v) {
      return v.name() + "=" + v.volume_id() + (v.read_only() ? ":ro" : "");
    });
    t.rows.push_back({a.id(), a.namespace_(), a.node_id(), a.group().empty() ? "-" : a.group(),
                      std::string(name_of(a.state())), vols.empty() ? "-" : vols,
                      relative_time(a.modified_at_ms(), now_ms)});
  }
  return render_table(t);
}

std::string render_placement(const v1::Response& r) {
  if (r.placement().empty()) return "No node is known (see berth node status); nothing was run.\n";
  table t{{"NODE", "FITS", "ALLOCS", "REASON"}, {}};
  std::string chosen;
  for (const auto& v : r.placement()) {
    t.rows.push_back({v.node_id() + (v.chosen() ? " *" : ""), v.reason().empty() ? "yes" : "no",
                      std::to_string(v.allocs()), v.reason().empty() ? "-" : v.reason()});
    if (v.chosen()) chosen = v.node_id();
  }
  return render_table(t) +
         (chosen.empty() ? "No node fits now; nothing was run.\n"
                         : "Would run on node '" + chosen +
                               "' (*: of the nodes that fit, the fewest allocs, ties by name); "
                               "nothing was run.\n");
}

std::string render_alloc(const v1::Response& r, int64_t now_ms) {
  if (r.allocs().empty()) return "";
  const auto& a = r.allocs(0);
  auto cmd = join(a.command(), " ");
  bool terminal = alloc_terminal(a.state());
  std::string out = details({{"ID", a.id()},
                             {"Namespace", a.namespace_()},
                             {"Node", a.node_id()},
                             {"Group", a.group().empty() ? "-" : a.group()},
                             {"Replaces", a.replaces().empty() ? "-" : a.replaces()},
                             {"State", std::string(name_of(a.state()))},
                             {"Message", a.message().empty() ? "-" : a.message()},
                             {"Command", cmd.empty() ? "- (runs until berth alloc stop)" : cmd},
                             {"Exit Code", terminal && !cmd.empty() ? std::to_string(a.exit_code()) : "-"},
                             {"Created", relative_time(a.created_at_ms(), now_ms)},
                             {"Modified", relative_time(a.modified_at_ms(), now_ms)}});
  if (a.volumes().empty()) return out;
  table t{{"NAME", "VOLUME", "ACCESS", "CLAIM", "PATH"}, {}};
  for (const auto& v : a.volumes()) {
    std::string claim = "-";
    for (const auto& vol : r.volumes())
      if (vol.id() == v.volume_id())
        for (const auto& c : vol.claims())
          if (c.alloc_id() == a.id()) claim = std::string(name_of(c.state()));
    t.rows.push_back({v.name(), v.volume_id(), v.read_only() ? "read" : "write", claim,
                      v.published_path().empty() ? "-" : v.published_path()});
  }
  return out + "\nVolumes\n" + render_table(t);
}

std::string render_snapshot_list(const v1::Response& r, int64_t now_ms) {
  if (r.snapshots().empty()) return "No snapshots.\n";
  table t{{"SNAPSHOT ID", "PLUGIN", "VOLUME", "GROUP", "SIZE", "CREATED", "READY"}, {}};
  for (const auto& s : r.snapshots()) {
    auto volume = s.source_volume_id().empty() ? s.source_external_id() + " (external id)"
                                               : s.source_volume_id();
    t.rows.push_back({s.id(), s.plugin_id(), volume,
                      s.group_snapshot_id().empty() ? "-" : s.group_snapshot_id(),
                      bytes(s.size_bytes()), relative_time(s.created_at_ms(), now_ms),
                      yes_no(s.ready_to_use())});
  }
  return render_table(t);
}

}  // namespace berth
