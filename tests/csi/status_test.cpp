#include "csi/status.hpp"

#include <doctest/doctest.h>

using namespace berth::csi;

TEST_CASE("status: OK is done for every method") {
  for (auto m : {method::create_volume, method::node_unpublish_volume, method::probe})
    CHECK(classify(m, code::ok) == outcome::done);
}

TEST_CASE("status: transient codes are retryable") {
  for (auto c : {code::unavailable, code::deadline_exceeded, code::aborted,
                 code::resource_exhausted, code::cancelled}) {
    CHECK(classify(method::controller_publish_volume, c) == outcome::retryable);
    CHECK(classify(method::node_unstage_volume, c) == outcome::retryable);
  }
}

TEST_CASE("status: NOT_FOUND on a release step counts as already done") {
  CHECK(classify(method::node_unpublish_volume, code::not_found) == outcome::already_done);
  CHECK(classify(method::node_unstage_volume, code::not_found) == outcome::already_done);
  CHECK(classify(method::controller_unpublish_volume, code::not_found)
        == outcome::already_done);
  CHECK(classify(method::delete_snapshot, code::not_found) == outcome::already_done);
  CHECK(classify(method::delete_volume_group_snapshot, code::not_found)
        == outcome::already_done);
}

TEST_CASE("status: NOT_FOUND on a claim step is final") {
  CHECK(classify(method::controller_publish_volume, code::not_found) == outcome::final);
  CHECK(classify(method::node_stage_volume, code::not_found) == outcome::final);
  CHECK(classify(method::node_publish_volume, code::not_found) == outcome::final);
  CHECK(classify(method::delete_volume, code::not_found) == outcome::final);
  CHECK(classify(method::create_volume_group_snapshot, code::not_found) == outcome::final);
  CHECK(classify(method::get_volume_group_snapshot, code::not_found) == outcome::final);
}

TEST_CASE("status: invalid, unimplemented and unknown codes are final") {
  for (auto c : {code::invalid_argument, code::unimplemented, code::already_exists,
                 code::failed_precondition, code::out_of_range, code::permission_denied,
                 code::unauthenticated, code::internal, code::unknown, code::data_loss,
                 static_cast<code>(42)})
    CHECK(classify(method::node_publish_volume, c) == outcome::final);
}

TEST_CASE("status: make_status keeps the plugin's message and code") {
  auto s = make_status(method::node_unstage_volume, code::not_found, "volume v1 is gone");
  CHECK(s.kind == outcome::already_done);
  CHECK(s.grpc_code == code::not_found);
  CHECK(s.message == "volume v1 is gone");
  CHECK_FALSE(s.ok());
}

TEST_CASE("status: names match the spec and gRPC") {
  CHECK(method_name(method::controller_unpublish_volume) == "ControllerUnpublishVolume");
  CHECK(method_name(method::node_get_info) == "NodeGetInfo");
  CHECK(method_name(method::group_controller_get_capabilities)
        == "GroupControllerGetCapabilities");
  CHECK(method_name(method::create_volume_group_snapshot) == "CreateVolumeGroupSnapshot");
  CHECK(method_name(method::delete_volume_group_snapshot) == "DeleteVolumeGroupSnapshot");
  CHECK(method_name(method::get_volume_group_snapshot) == "GetVolumeGroupSnapshot");
  CHECK(code_name(code::failed_precondition) == "FAILED_PRECONDITION");
  CHECK(code_name(code::unauthenticated) == "UNAUTHENTICATED");
  CHECK(code_name(static_cast<code>(99)) == "CODE_99");
  CHECK(outcome_name(outcome::already_done) == "already_done");
}
