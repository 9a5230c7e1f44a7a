#include "control/expansion.hpp"

#include <algorithm>
#include <set>

#include "messages/model.hpp"

namespace berth {

namespace {

std::string q(const std::string& s) {
  return "'" + s + "'";
}

}  // namespace

std::string size_text(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  int64_t v = n;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? std::to_string(n) + " bytes" : std::to_string(v) + " " + units[u];
}

expansion_support expansion_support_of(const v1::Plugin& p) {
  expansion_support s;
  s.controller = p.controller_expands();
  for (const auto& c : p.controllers()) {
    // Whether the step exists is the plugin's capability, not its health
    // now: an unhealthy controller makes the step wait, never skips it.
    s.controller |= c.expand_volume();
    s.online |= c.expansion_online();
    s.offline |= c.expansion_offline();
  }
  for (const auto& n : p.nodes()) {
    s.node |= n.node_expand_volume();
    s.online |= n.expansion_online();
    s.offline |= n.expansion_offline();
  }
  return s;
}

int64_t current_capacity(const v1::Volume& v) {
  return v.capacity_bytes() > 0 ? v.capacity_bytes() : v.capacity_min();
}

bool expanding(const v1::Volume& v) {
  return v.has_expansion() && v.expansion().required_bytes() > 0;
}

std::variant<failure, expand_decision> decide_expand(const v1::Volume& v, int64_t required,
                                                     const v1::Plugin* p, int64_t now_ms) {
  auto what = "volume " + q(v.id());
  if (required <= 0)
    return failure{errc::invalid, "volume expand " + q(v.id()) +
                                      ": SIZE must be more than 0 bytes (e.g. 2GiB, 500MiB or "
                                      "1073741824)"};
  if (v.capacity_max() > 0 && required > v.capacity_max())
    return failure{errc::refused, what + " cannot grow to " + size_text(required) +
                                      ": its capacity_max is " + size_text(v.capacity_max()) +
                                      " (re-register it with a larger capacity_max first)"};
  expand_decision d;
  if (expanding(v)) {
    auto pending = v.expansion().required_bytes();
    if (required == pending) {
      d.message = what + " is being expanded to " + size_text(pending) + " already";
      return d;
    }
    if (required < pending)
      return failure{errc::refused, what + " is being expanded to " + size_text(pending) +
                                        "; it cannot be shrunk to " + size_text(required) +
                                        " (CSI volumes only grow)"};
  } else {
    auto now = current_capacity(v);
    if (required == now ||
        (v.capacity_bytes() > 0 && required < v.capacity_bytes() && required >= v.capacity_min())) {
      d.message = what + " is " + size_text(now) + " already: nothing to expand";
      return d;
    }
    if (required < now)
      return failure{errc::refused, what + " is " + size_text(now) + "; it cannot be shrunk to " +
                                        size_text(required) + " (CSI volumes only grow)"};
  }
  if (p == nullptr)
    return failure{errc::not_found, "plugin " + q(v.plugin_id()) + " of volume " + q(v.id()) +
                                        " is not registered; the volume cannot be expanded "
                                        "until the plugin runs again"};
  auto s = expansion_support_of(*p);
  if (!s.controller && !s.node)
    return failure{errc::refused, "plugin " + q(p->id()) +
                                      " advertises no EXPAND_VOLUME (as a controller or a node "
                                      "capability), so volume " +
                                      q(v.id()) + " cannot be expanded"};
  d.start = true;
  d.next = v;
  d.next.set_capacity_min(required);
  auto* e = d.next.mutable_expansion();
  e->Clear();
  e->set_required_bytes(required);
  e->set_limit_bytes(v.capacity_max());
  e->set_controller_done(!s.controller);
  e->set_node_required(!s.controller);
  e->set_requested_at_ms(now_ms);
  d.message = what + " expansion to " + size_text(required) + " requested";
  return d;
}

std::optional<failure> reregistration_expansion(const v1::Volume& before, v1::Volume& next,
                                                const v1::Plugin* p, int64_t now_ms) {
  // What the plugin reported and an expansion in progress stay.
  next.set_capacity_bytes(before.capacity_bytes());
  if (before.has_expansion())
    *next.mutable_expansion() = before.expansion();
  else
    next.clear_expansion();
  auto asked = next.capacity_min();
  auto floor = expanding(before) ? before.expansion().required_bytes() : current_capacity(before);
  if (asked == floor || asked == before.capacity_min()) return std::nullopt;
  // Within what the plugin gave already: nothing to expand.
  if (!expanding(before) && asked >= before.capacity_min() && asked <= before.capacity_bytes())
    return std::nullopt;
  if (asked < floor)
    return failure{errc::refused, "volume " + q(before.id()) + " re-registration: capacity_min " +
                                      size_text(asked) + " is less than the volume's " +
                                      size_text(floor) +
                                      " (CSI volumes only grow; keep capacity_min at least " +
                                      size_text(floor) + ")"};
  auto probe = before;
  probe.set_capacity_max(next.capacity_max());
  auto d = decide_expand(probe, asked, p, now_ms);
  if (auto* f = std::get_if<failure>(&d)) {
    f->message =
        "volume " + q(before.id()) + " re-registration with a larger capacity_min: " + f->message;
    return *f;
  }
  const auto& dec = std::get<expand_decision>(d);
  if (dec.start) *next.mutable_expansion() = dec.next.expansion();
  return std::nullopt;
}

std::vector<std::string> published_nodes(const v1::Volume& v) {
  std::set<std::string> nodes;
  for (const auto& c : v.claims())
    if (c.state() == v1::CLAIM_TAKEN && !c.node_id().empty()) nodes.insert(c.node_id());
  return {nodes.begin(), nodes.end()};
}

expansion_step next_expansion_step(const v1::Volume& v, const expansion_support& s) {
  expansion_step step;
  if (!expanding(v)) return step;
  const auto& e = v.expansion();
  auto published = published_nodes(v);
  if (!e.controller_done()) {
    step.action = s.offline_only() && !published.empty() ? expansion_action::wait_for_unpublish
                                                         : expansion_action::controller_expand;
    return step;
  }
  if (!e.node_required() || !s.node) {
    step.action = expansion_action::finish;
    return step;
  }
  std::set<std::string> done(e.nodes_done().begin(), e.nodes_done().end());
  if (!s.offline_only()) {
    for (const auto& n : published)
      if (!done.count(n)) {
        step.action = expansion_action::node_expand;
        step.node_id = n;
        return step;
      }
  }
  bool all_done = std::all_of(published.begin(), published.end(),
                              [&](const std::string& n) { return done.count(n) > 0; });
  step.action =
      !done.empty() && all_done ? expansion_action::finish : expansion_action::wait_for_stage;
  return step;
}

std::string describe(const expansion_step& s) {
  switch (s.action) {
    case expansion_action::none:
      return "nothing";
    case expansion_action::controller_expand:
      return "ControllerExpandVolume";
    case expansion_action::wait_for_unpublish:
      return "ControllerExpandVolume once no claim is published (the plugin expands offline "
             "only)";
    case expansion_action::node_expand:
      return "NodeExpandVolume on node " + q(s.node_id);
    case expansion_action::wait_for_stage:
      return "NodeExpandVolume at the volume's next stage";
    case expansion_action::finish:
      return "finishing";
  }
  return "?";
}

v1::Volume after_controller_expand(v1::Volume v, int64_t capacity, bool node_expansion_required,
                                   const expansion_support& s) {
  if (!expanding(v)) return v;
  auto* e = v.mutable_expansion();
  e->set_controller_done(true);
  e->set_node_required(node_expansion_required && s.node);
  if (capacity > 0) v.set_capacity_bytes(capacity);
  return v;
}

v1::Volume after_node_expand(v1::Volume v, const std::string& node, int64_t capacity) {
  if (!expanding(v)) return v;
  auto* e = v.mutable_expansion();
  if (std::find(e->nodes_done().begin(), e->nodes_done().end(), node) == e->nodes_done().end())
    e->add_nodes_done(node);
  if (capacity > 0) v.set_capacity_bytes(capacity);
  return v;
}

v1::Volume expansion_finished(v1::Volume v) {
  if (!v.has_expansion()) return v;
  auto required = v.expansion().required_bytes();
  if (v.capacity_bytes() < required) v.set_capacity_bytes(required);
  v.clear_expansion();
  return v;
}

bool publish_expands(const v1::Volume& v, const expansion_support& s) {
  return expanding(v) && v.expansion().controller_done() && v.expansion().node_required() && s.node;
}

failure expansion_waits(const v1::Volume& v, const expansion_step& s) {
  auto what = "volume " + q(v.id()) + " expansion to " + size_text(v.expansion().required_bytes());
  switch (s.action) {
    case expansion_action::wait_for_unpublish:
      return failure{errc::unavailable,
                     what + " waits until no claim is published: plugin " + q(v.plugin_id()) +
                         " expands volumes offline only (it runs once the claims are released)"};
    case expansion_action::wait_for_stage:
      return failure{errc::unavailable,
                     what +
                         ": NodeExpandVolume runs when the volume is next staged on a node "
                         "(claim it to finish the expansion)"};
    default:
      return failure{errc::unavailable, what + " waits for " + describe(s)};
  }
}

int64_t expansion_retry_delay_ms(uint32_t attempts, double jitter) {
  return retry_delay_ms(attempts, jitter, 1000, 60000);
}

}  // namespace berth
