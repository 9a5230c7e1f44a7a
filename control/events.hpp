// The event stream: what one applied change means as events (VolumeRegistered,
// ClaimTaken, NodeDown, ...), and the bounded journal of recent events a
// server answers `berth event stream` from.  Pure: every server applies the
// same entries to the same state, so every server derives the same events
// with the same (index, seq), and a consumer can move between servers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

// The events of one committed entry at `index`, from what applying it did
// (`apply` of control/catalog: each change with the object it replaced), in
// the entry's order with seq 0, 1, ...  Every change gives at least one
// event.  A volume's claims give claim events (one per claim that appeared,
// changed or went); the volume itself a VolumeUpdated only when something
// besides its claims changed.  Volumes are redacted.
std::vector<v1::Event> events_of(uint64_t index, const std::vector<applied_change>& changes);

// Which events a consumer wants: no topics = every topic; an empty
// namespace = every namespace.  Node and plugin events have no namespace
// and pass any namespace; state events pass every filter.
struct event_filter {
  std::set<v1::EventTopic> topics;
  std::string ns;
};
bool matches(const event_filter& f, const v1::Event& e);

// A page of the journal: the events, the index to ask for next, or why the
// index asked for cannot be served.
struct event_page {
  std::optional<failure> error;
  uint64_t first_index = 0;  // with the error: the oldest index this journal serves
  std::vector<v1::Event> events;
  uint64_t next_index = 0;
};

// The last `capacity` events (at least) this server applied, by index.  It
// is complete from first_index(): it holds every event of every index from
// there to applied(); whole indexes are dropped when it is over capacity,
// so the events of one index are never split.  Not thread-safe.
class event_journal {
 public:
  // Starts empty after `applied` (what the state tables held at start).
  event_journal(size_t capacity, uint64_t applied);

  // The events of the entries after applied() up to `applied`, in order.
  void append(uint64_t applied, std::vector<v1::Event> events);
  // A snapshot replaced the state tables at `applied`: the events before
  // it were never seen here.
  void reset(uint64_t applied);

  // The matching events at index >= `from` (0: after applied()), at most
  // about `max` (all events of the last index included), and the index to
  // ask for next.  An index before first_index() is a not_found failure
  // naming the oldest index available.
  event_page read(const event_filter& f, uint64_t from, size_t max) const;

  uint64_t applied() const { return applied_; }
  uint64_t first_index() const { return first_index_; }
  size_t size() const { return events_.size(); }

 private:
  size_t capacity_;
  uint64_t applied_;
  uint64_t first_index_;
  std::deque<v1::Event> events_;
};

}  // namespace berth
