// The /v1/ HTTP API of a berthd's metrics port: read-only JSON views and the
// operator's actions (the web UI's buttons), each the same v1::Request the
// shell builds for that command, sent to this berthd's server actor (which
// forwards it to the leader, so the checks are the shell's), answered with
// the shell's --json renderers (messages/codec: never secrets); and the
// event stream.  Called on civetweb's threads: every call blocks its thread
// until the answer is there.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "actors/actors.hpp"
#include "apps/berthd/metrics_server.hpp"

namespace caf {
class actor_system;
}

namespace berth {

// Answers one /v1/ request (a path it does not know: 404 naming the paths).
// `api` is null on a client-only berthd, which answers /v1/status only.
std::optional<json_view> answer_http(caf::actor_system& sys, const api_actor& api,
                                     const std::string& node_name, const http_request& req);

// GET /v1/event/stream?index=N&topic=T,...&namespace=NS&until_index=M: the
// event stream as newline-delimited JSON (the lines of `berth event
// stream`), chunked and held open; a `{}` line every 10 s without events.
void event_stream_view(caf::actor_system& sys, const api_actor& api, const http_request& req,
                       http_stream& out);

// GET /v1/agent/monitor?log_level=L&node_id=N&lines=K&plain=true: berth
// monitor's lines, streamed (text with plain=true, else Nomad's frames).
void monitor_view(caf::actor_system& sys, const api_actor& api, const http_request& req,
                  http_stream& out);

}  // namespace berth
