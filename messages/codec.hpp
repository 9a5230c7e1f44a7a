// Text forms of the domain types: the volume spec file (JSON or YAML) and
// the JSON views the shell prints with --json.  Pure: strings in, values out.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

// Parses a volume spec (JSON, or YAML when it is not JSON).  Unknown keys,
// wrong types and invalid values are errors; every problem is reported at
// once, each naming its field.  Defaults are applied and the result is
// validated (validate_volume), so a returned volume is registrable.
// For `spec_use::create`, external_id must be absent (the plugin chooses
// it on CreateVolume).
// A size as volume specs give it: bytes ("1073741824") or with a unit
// ("1GiB", "500MiB", "2GB"); nullopt when it is not one.
std::optional<int64_t> parse_size(std::string_view text);

enum class spec_use { registration, create };
std::variant<v1::Volume, std::vector<problem>> parse_volume_spec(
    std::string_view text, spec_use use = spec_use::registration);

// JSON views with snake_case keys.  Volumes are rendered from a redacted
// copy: never secrets, never mount flags.  `plugin` (may be null) gives the
// volume's health.
nlohmann::json volume_json(const v1::Volume& v, const v1::Plugin* plugin);
nlohmann::json claim_json(const v1::Claim& c);
nlohmann::json alloc_json(const v1::Alloc& a);
nlohmann::json plugin_json(const v1::Plugin& p);
nlohmann::json node_json(const v1::Node& n);
nlohmann::json agent_json(const v1::AgentStatus& a);
nlohmann::json raft_json(const v1::RaftStatus& s);
// A CSI snapshot as volume snapshot create and list show it.
nlohmann::json snapshot_json(const v1::Snapshot& s);

// The answers of the shell's requests as its --json prints them and the
// HTTP views serve them (one renderer for both).
// The plugin of the answer with this id (null: none).
const v1::Plugin* plugin_in(const v1::Response& r, const std::string& id);
// The answer's volumes, each with its plugin's health.
nlohmann::json volumes_json(const v1::Response& r);
// The answer's single volume (null without one).
nlohmann::json single_volume_json(const v1::Response& r);
// One alloc (the answer's first) with the claims it holds, each naming its
// volume.
nlohmann::json alloc_with_claims_json(const v1::Response& r, const std::string& id);
// One node (the answer's first) with its volumes and allocs.
nlohmann::json node_with_volumes_json(const v1::Response& r);
// The node a drain or eligibility answer names, with the answer's message.
nlohmann::json node_message_json(const v1::Response& r);
// The answer's snapshots.
nlohmann::json snapshots_json(const v1::Response& r);
// alloc run --explain: the chosen node (null: none fits) and every node.
nlohmann::json placement_json(const v1::Response& r);
// An ACL token; its secret only when given (once, when it is made).
nlohmann::json token_json(const v1::AclToken& t, const std::string& secret);
// An ACL policy, with its rules when `rules`.
nlohmann::json policy_json(const v1::AclPolicy& p, bool rules);

// An event of the event stream (one line of `berth event stream` and of
// /v1/event/stream): index, seq, topic, type, namespace, key and the object
// ("object": a volume without its health, which derives from the plugin; a
// claim with its volume_id).
nlohmann::json event_json(const v1::Event& e);

// "volume", "claim", "alloc", "node", "plugin", "state".
std::string_view name_of(v1::EventTopic t);
// The topic a name names (as --topic takes it), or nullopt.
std::optional<v1::EventTopic> parse_event_topic(std::string_view name);

// A duration as operators write it ("90s", "30m", "1h30m", "500ms", "0s"):
// milliseconds, or nullopt for anything else (a bare number, a negative or
// unknown unit, more than a year).
std::optional<int64_t> parse_duration_ms(std::string_view text);

// Standard base64 (RFC 4648, with padding): a byte string in JSON the way
// Go's encoding/json writes a []byte (Nomad's StreamFrame.Data).
std::string base64(std::string_view bytes);

}  // namespace berth
