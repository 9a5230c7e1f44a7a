// berth event stream: long polls on a server's event journal, printing one
// JSON line per event, until Ctrl-C or --until-index.  When a server stops
// answering (killed, unreachable) it goes on at the next of its addresses
// from the index after the last one printed: every server derives the same
// events with the same (index, seq), so nothing is missed or printed twice.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "messages/api.pb.h"

namespace berth {

struct event_stream_options {
  std::vector<std::string> addresses;  // HOST:PORT of servers, tried in turn
  std::vector<v1::EventTopic> topics;  // none: every topic
  std::string ns;                      // "": every namespace
  uint64_t index = 0;                  // 0: from now
  uint64_t until_index = 0;            // 0: never stop
  int timeout = 30;  // seconds without an answer from any server before giving up
};

// Returns the exit code; events on `out`, reconnections and errors on `err`.
int stream_events(const event_stream_options& o, bool json_errors, std::ostream& out,
                  std::ostream& err);

}  // namespace berth
