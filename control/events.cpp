#include "control/events.hpp"

#include <algorithm>
#include <map>

#include <google/protobuf/util/message_differencer.h>

namespace berth {

namespace {

using google::protobuf::util::MessageDifferencer;

// Collects the events of one entry, numbering them.
struct builder {
  uint64_t index;
  std::vector<v1::Event> out;

  v1::Event& add(v1::EventTopic topic, std::string type, std::string ns, std::string key) {
    auto& e = out.emplace_back();
    e.set_index(index);
    e.set_seq(static_cast<uint32_t>(out.size() - 1));
    e.set_topic(topic);
    e.set_type(std::move(type));
    e.set_namespace_(std::move(ns));
    e.set_key(std::move(key));
    return e;
  }
};

std::string claim_type(v1::ClaimState s) {
  switch (s) {
    case v1::CLAIM_TAKEN: return "ClaimTaken";
    case v1::CLAIM_UNPUBLISHING: return "ClaimUnpublishing";
    case v1::CLAIM_NODE_DETACHED: return "ClaimNodeDetached";
    case v1::CLAIM_CONTROLLER_DETACHED: return "ClaimControllerDetached";
    case v1::CLAIM_READY_TO_FREE: return "ClaimReadyToFree";
    default: return "ClaimUpdated";
  }
}

void claim_event(builder& b, const v1::Volume& v, const v1::Claim& c, std::string type) {
  auto& e = b.add(v1::EVENT_CLAIM, std::move(type), v.namespace_(), v.id() + "/" + c.alloc_id());
  *e.mutable_claim() = c;
  e.set_volume_id(v.id());
}

// The claim events between two versions of a volume (`before` may be
// empty: a new volume): claims in the volume's order, then the freed ones.
// Returns how many.
size_t claim_events(builder& b, const v1::Volume& before, const v1::Volume& after) {
  size_t n = 0;
  std::map<std::string, const v1::Claim*> old;
  for (const auto& c : before.claims()) old[c.alloc_id()] = &c;
  for (const auto& c : after.claims()) {
    auto it = old.find(c.alloc_id());
    if (it == old.end()) {
      claim_event(b, after, c, claim_type(c.state()));
      ++n;
      continue;
    }
    const v1::Claim* was = it->second;
    old.erase(it);
    if (MessageDifferencer::Equals(*was, c)) continue;
    claim_event(b, after, c, was->state() == c.state() ? "ClaimUpdated" : claim_type(c.state()));
    ++n;
  }
  for (const auto& c : before.claims())
    if (old.count(c.alloc_id()) != 0) {
      claim_event(b, after, c, "ClaimFreed");
      ++n;
    }
  return n;
}

// Whether anything besides the claims and the indexes differs.
bool volume_itself_changed(v1::Volume a, v1::Volume b) {
  for (auto* v : {&a, &b}) {
    v->clear_claims();
    v->clear_create_index();
    v->clear_modify_index();
  }
  return !MessageDifferencer::Equals(a, b);
}

void volume_events(builder& b, const applied_change& ch) {
  const auto& v = ch.change.volume_upsert();
  if (!ch.before.has_volume_upsert()) {
    *b.add(v1::EVENT_VOLUME, "VolumeRegistered", v.namespace_(), v.id()).mutable_volume() =
        redacted(v);
    claim_events(b, v1::Volume{}, v);
    return;
  }
  const auto& was = ch.before.volume_upsert();
  auto claims = claim_events(b, was, v);
  if (claims == 0 || volume_itself_changed(was, v))
    *b.add(v1::EVENT_VOLUME, "VolumeUpdated", v.namespace_(), v.id()).mutable_volume() =
        redacted(v);
}

void volume_delete_events(builder& b, const applied_change& ch) {
  v1::Volume was;
  if (ch.before.has_volume_upsert()) {
    was = ch.before.volume_upsert();
  } else {
    was.set_namespace_(ch.change.volume_delete().namespace_());
    was.set_id(ch.change.volume_delete().id());
  }
  claim_events(b, was, [&] {
    auto none = was;
    none.clear_claims();
    return none;
  }());
  *b.add(v1::EVENT_VOLUME, "VolumeDeregistered", was.namespace_(), was.id()).mutable_volume() =
      redacted(was);
}

std::string node_type(const applied_change& ch) {
  const auto& n = ch.change.node_upsert();
  if (!ch.before.has_node_upsert()) return n.status() == v1::NODE_DOWN ? "NodeDown" : "NodeRegistered";
  if (ch.before.node_upsert().status() == n.status()) return "NodeUpdated";
  return n.status() == v1::NODE_DOWN ? "NodeDown" : n.status() == v1::NODE_READY ? "NodeReady"
                                                                               : "NodeUpdated";
}

}  // namespace

std::vector<v1::Event> events_of(uint64_t index, const std::vector<applied_change>& changes) {
  builder b{index, {}};
  for (const auto& ch : changes) {
    const auto& c = ch.change;
    switch (c.change_case()) {
      case v1::Change::kVolumeUpsert:
        volume_events(b, ch);
        break;
      case v1::Change::kVolumeDelete:
        volume_delete_events(b, ch);
        break;
      case v1::Change::kPluginUpsert:
        *b.add(v1::EVENT_PLUGIN, ch.before.has_plugin_upsert() ? "PluginUpdated" : "PluginCreated",
               "", c.plugin_upsert().id())
             .mutable_plugin() = c.plugin_upsert();
        break;
      case v1::Change::kPluginDelete: {
        auto& e = b.add(v1::EVENT_PLUGIN, "PluginDeleted", "", c.plugin_delete());
        if (ch.before.has_plugin_upsert())
          *e.mutable_plugin() = ch.before.plugin_upsert();
        else
          e.mutable_plugin()->set_id(c.plugin_delete());
        break;
      }
      case v1::Change::kNodeUpsert:
        *b.add(v1::EVENT_NODE, node_type(ch), "", c.node_upsert().id()).mutable_node() =
            c.node_upsert();
        break;
      case v1::Change::kNodeDelete: {
        auto& e = b.add(v1::EVENT_NODE, "NodeDeregistered", "", c.node_delete());
        if (ch.before.has_node_upsert())
          *e.mutable_node() = ch.before.node_upsert();
        else
          e.mutable_node()->set_id(c.node_delete());
        break;
      }
      case v1::Change::kAllocUpsert: {
        const auto& a = c.alloc_upsert();
        *b.add(v1::EVENT_ALLOC, ch.before.has_alloc_upsert() ? "AllocUpdated" : "AllocCreated",
               a.namespace_(), a.id())
             .mutable_alloc() = a;
        break;
      }
      case v1::Change::kAllocDelete: {
        v1::Alloc a;
        if (ch.before.has_alloc_upsert())
          a = ch.before.alloc_upsert();
        else
          a.set_id(c.alloc_delete());
        *b.add(v1::EVENT_ALLOC, "AllocDeleted", a.namespace_(), a.id()).mutable_alloc() = a;
        break;
      }
      case v1::Change::kRestoreState:
        b.add(v1::EVENT_STATE, "StateRestored", "", "");
        break;
      // ACL policies and tokens are not in the event stream (as in Nomad,
      // whose ACL topics need a management token): nothing to derive.
      case v1::Change::kAclPolicyUpsert:
      case v1::Change::kAclPolicyDelete:
      case v1::Change::kAclTokenUpsert:
      case v1::Change::kAclTokenDelete:
      case v1::Change::kAclBootstrap:
      // Resolved by the catalog's apply into an alloc change before here.
      case v1::Change::kAllocVolumeFreed:
      case v1::Change::kAllocVolumeClaimed:
      case v1::Change::CHANGE_NOT_SET:
        break;
    }
  }
  return std::move(b.out);
}

bool matches(const event_filter& f, const v1::Event& e) {
  if (e.topic() == v1::EVENT_STATE) return true;
  if (!f.topics.empty() && f.topics.count(e.topic()) == 0) return false;
  return f.ns.empty() || e.namespace_().empty() || e.namespace_() == f.ns;
}

event_journal::event_journal(size_t capacity, uint64_t applied)
    : capacity_(std::max<size_t>(capacity, 1)), applied_(applied), first_index_(applied + 1) {}

void event_journal::append(uint64_t applied, std::vector<v1::Event> events) {
  for (auto& e : events) events_.push_back(std::move(e));
  applied_ = std::max(applied_, applied);
  while (events_.size() > capacity_) {
    auto index = events_.front().index();
    while (!events_.empty() && events_.front().index() == index) events_.pop_front();
    first_index_ = index + 1;
  }
}

void event_journal::reset(uint64_t applied) {
  events_.clear();
  applied_ = applied;
  first_index_ = applied + 1;
}

event_page event_journal::read(const event_filter& f, uint64_t from, size_t max) const {
  event_page page;
  max = std::max<size_t>(max, 1);
  if (from == 0) from = applied_ + 1;
  if (from < first_index_) {
    page.first_index = first_index_;
    page.error = failure{
        errc::not_found,
        "the events before index " + std::to_string(first_index_) +
            " are no longer in this server's journal (it keeps the most recent events and "
            "those applied since it started); resume with --index " +
            std::to_string(first_index_) + " after reading the state (berth volume status)"};
    return page;
  }
  page.next_index = std::max(from, applied_ + 1);
  auto it = std::lower_bound(events_.begin(), events_.end(), from,
                             [](const v1::Event& e, uint64_t i) { return e.index() < i; });
  for (; it != events_.end(); ++it) {
    if (page.events.size() >= max && page.events.back().index() != it->index()) {
      page.next_index = page.events.back().index() + 1;
      break;
    }
    if (matches(f, *it)) page.events.push_back(*it);
  }
  return page;
}

}  // namespace berth
