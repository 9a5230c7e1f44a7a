#include "actors/actors.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>

namespace berth {

caf::error make_error(errc code, std::string message) {
  return caf::error(static_cast<uint8_t>(code), caf::atom("berth"),
                    caf::make_message(std::move(message)));
}

namespace {

// A failure's flags in its caf::error's context, next to its message, so
// that they survive every hop between actors.
constexpr uint8_t flag_retry = 1;
constexpr uint8_t flag_maybe_applied = 2;

}  // namespace

caf::error to_error(const failure& f) {
  uint8_t flags = (f.retry ? flag_retry : 0) | (f.maybe_applied ? flag_maybe_applied : 0);
  if (flags == 0) return make_error(f.code, f.message);
  return caf::error(static_cast<uint8_t>(f.code), caf::atom("berth"),
                    caf::make_message(f.message, flags));
}

failure to_failure(const caf::error& e) {
  if (e.category() == caf::atom("berth")) {
    failure f{static_cast<errc>(e.code()), {}};
    const auto& ctx = e.context();
    if (ctx.match_elements<std::string>()) {
      f.message = ctx.get_as<std::string>(0);
    } else if (ctx.match_elements<std::string, uint8_t>()) {
      f.message = ctx.get_as<std::string>(0);
      auto flags = ctx.get_as<uint8_t>(1);
      f.retry = (flags & flag_retry) != 0;
      f.maybe_applied = (flags & flag_maybe_applied) != 0;
    }
    return f;
  }
  if (e == caf::sec::request_timeout)
    return {errc::unavailable, "the request timed out; is the server overloaded or its disk stalled?"};
  if (e == caf::sec::request_receiver_down)
    return {errc::unavailable, "the actor handling the request stopped; try again"};
  return {errc::internal, caf::to_string(e)};
}

std::pair<std::string, uint16_t> split_address(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return {address, 0};
  try {
    return {address.substr(0, colon), static_cast<uint16_t>(std::stoi(address.substr(colon + 1)))};
  } catch (const std::exception&) {
    return {address.substr(0, colon), 0};
  }
}

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<pb<v1::Request>>("berth.v1.Request");
  cfg.add_message_type<pb<v1::Response>>("berth.v1.Response");
  cfg.add_message_type<pb<v1::EventStreamRequest>>("berth.v1.EventStreamRequest");
  cfg.add_message_type<pb<v1::ServerList>>("berth.v1.ServerList");
  cfg.add_message_type<pb<v1::ServerInfo>>("berth.v1.ServerInfo");
  cfg.add_message_type<pb<v1::ServerProof>>("berth.v1.ServerProof");
  cfg.add_message_type<pb<v1::RaftStatus>>("berth.v1.RaftStatus");
  cfg.add_message_type<pb<v1::LogEntry>>("berth.v1.LogEntry");
  cfg.add_message_type<pb<v1::Volume>>("berth.v1.Volume");
  cfg.add_message_type<pb<v1::NodeVolumeRequest>>("berth.v1.NodeVolumeRequest");
  cfg.add_message_type<pb<v1::NodeVolumeResult>>("berth.v1.NodeVolumeResult");
  cfg.add_message_type<pb<v1::Alloc>>("berth.v1.Alloc");
  cfg.add_message_type<pb<v1::MonitorRequest>>("berth.v1.MonitorRequest");
  cfg.add_message_type<pb<v1::MonitorResult>>("berth.v1.MonitorResult");
  cfg.add_message_type<pb<v1::SnapshotRequest>>("berth.v1.SnapshotRequest");
  cfg.add_message_type<pb<v1::Snapshot>>("berth.v1.Snapshot");
  cfg.add_message_type<pb<v1::SnapshotList>>("berth.v1.SnapshotList");
  cfg.add_message_type<pb<v1::ExternalVolumeListRequest>>("berth.v1.ExternalVolumeListRequest");
  cfg.add_message_type<pb<v1::ExternalVolumeList>>("berth.v1.ExternalVolumeList");
  cfg.add_message_type<pb<v1::VolumeModifyRequest>>("berth.v1.VolumeModifyRequest");
  cfg.add_message_type<pb<v1::VolumeHealthRequest>>("berth.v1.VolumeHealthRequest");
  cfg.add_message_type<pb<v1::VolumeHealthResult>>("berth.v1.VolumeHealthResult");
  cfg.add_message_type<pb<v1::VolumeExpandRequest>>("berth.v1.VolumeExpandRequest");
  cfg.add_message_type<pb<raft::v1::Message>>("berth.raft.v1.Message");
  cfg.add_message_type<node_actor>("berth.node_actor");
  cfg.add_message_type<api_actor>("berth.api_actor");
}

}  // namespace berth
