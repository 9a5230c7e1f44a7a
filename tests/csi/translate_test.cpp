#include "csi/translate.hpp"

#include <doctest/doctest.h>

using namespace berth;
using namespace berth::csi;

namespace {

v1::Volume volume_spec() {
  v1::Volume v;
  v.set_id("db");
  v.set_namespace_("prod");
  v.set_plugin_id("hostpath");
  v.set_external_id("vol-123");
  v.mutable_mount_options()->set_fs_type("ext4");
  v.mutable_mount_options()->add_mount_flags("noatime");
  (*v.mutable_secrets())["token"] = "s3cret";
  (*v.mutable_context())["pool"] = "fast";
  (*v.mutable_parameters())["replicas"] = "3";
  auto* c = v.add_capabilities();
  c->set_access_mode(v1::SINGLE_NODE_WRITER);
  c->set_attachment_mode(v1::FILE_SYSTEM);
  c = v.add_capabilities();
  c->set_access_mode(v1::MULTI_NODE_READER_ONLY);
  c->set_attachment_mode(v1::BLOCK_DEVICE);
  return v;
}

v1::NodeVolumeRequest node_request() {
  v1::NodeVolumeRequest r;
  r.set_plugin_id("hostpath");
  r.set_alloc_id("a1");
  *r.mutable_volume() = volume_spec();
  r.set_access_mode(v1::SINGLE_NODE_WRITER);
  r.set_attachment_mode(v1::FILE_SYSTEM);
  (*r.mutable_publish_context())["device"] = "/dev/xvdf";
  r.set_csi_node_id("csi-n1");
  r.set_leader_term(4);
  return r;
}

call_status status_of(method m, code c, std::string msg = "boom") {
  return make_status(m, c, std::move(msg));
}

}  // namespace

TEST_CASE("translate: every berth access mode maps to CSI's wire value") {
  CHECK(to_csi(v1::SINGLE_NODE_READER_ONLY) == access_mode::single_node_reader_only);
  CHECK(to_csi(v1::SINGLE_NODE_WRITER) == access_mode::single_node_writer);
  CHECK(to_csi(v1::MULTI_NODE_READER_ONLY) == access_mode::multi_node_reader_only);
  CHECK(to_csi(v1::MULTI_NODE_SINGLE_WRITER) == access_mode::multi_node_single_writer);
  CHECK(to_csi(v1::MULTI_NODE_MULTI_WRITER) == access_mode::multi_node_multi_writer);
}

TEST_CASE("translate: an unset access mode is CSI's unknown, not a default writer") {
  CHECK(to_csi(v1::AccessMode{}) == access_mode::unknown);
  CHECK(to_csi(static_cast<v1::AccessMode>(99)) == access_mode::unknown);
}

TEST_CASE("translate: a claim's capability carries its modes, fs type and mount flags") {
  auto r = node_request();
  auto c = capability_of(r);
  CHECK(c.mode == access_mode::single_node_writer);
  CHECK_FALSE(c.block);
  CHECK(c.fs_type == "ext4");
  CHECK(c.mount_flags == std::vector<std::string>{"noatime"});
  r.set_attachment_mode(v1::BLOCK_DEVICE);
  r.set_access_mode(v1::MULTI_NODE_MULTI_WRITER);
  c = capability_of(r);
  CHECK(c.block);
  CHECK(c.mode == access_mode::multi_node_multi_writer);
}

TEST_CASE("translate: a volume's declared capability has its fs type but no mount flags") {
  auto v = volume_spec();
  auto c = capability_of(v, v.capabilities(1));
  CHECK(c.mode == access_mode::multi_node_reader_only);
  CHECK(c.block);
  CHECK(c.fs_type == "ext4");
  CHECK(c.mount_flags.empty());
}

TEST_CASE("translate: NodeStageVolume gets the staging path, context and secrets") {
  auto s = stage_request(node_request(), "/csi/hostpath/staging/prod/db/m");
  CHECK(s.volume_id == "vol-123");
  CHECK(s.staging_target_path == "/csi/hostpath/staging/prod/db/m");
  CHECK(s.publish_context.at("device") == "/dev/xvdf");
  CHECK(s.volume_context.at("pool") == "fast");
  CHECK(s.secrets.at("token") == "s3cret");
  CHECK(s.capability.fs_type == "ext4");
}

TEST_CASE("translate: NodePublishVolume with and without staging") {
  auto r = node_request();
  r.set_read_only(true);
  auto p = publish_request(r, "/stage", "/target");
  CHECK(p.volume_id == "vol-123");
  CHECK(p.staging_target_path == "/stage");
  CHECK(p.target_path == "/target");
  CHECK(p.readonly);
  CHECK(p.secrets.at("token") == "s3cret");
  CHECK(p.volume_context.at("pool") == "fast");
  CHECK(p.publish_context.at("device") == "/dev/xvdf");
  CHECK(p.capability.mount_flags == std::vector<std::string>{"noatime"});
  auto unstaged = publish_request(node_request(), "", "/target");
  CHECK(unstaged.staging_target_path.empty());
  CHECK_FALSE(unstaged.readonly);
}

TEST_CASE("translate: ControllerPublishVolume names the target node's CSI id") {
  auto r = node_request();
  r.set_read_only(true);
  auto p = controller_publish_request_of(r);
  CHECK(p.volume_id == "vol-123");
  CHECK(p.node_id == "csi-n1");
  CHECK(p.readonly);
  CHECK(p.capability.mode == access_mode::single_node_writer);
  CHECK(p.secrets.at("token") == "s3cret");
  CHECK(p.volume_context.at("pool") == "fast");
}

TEST_CASE("translate: CreateVolume is named namespace-id, sized and constrained") {
  auto v = volume_spec();
  v.set_capacity_min(1 << 20);
  v.set_capacity_max(1 << 30);
  auto* req = v.mutable_topology_request()->add_required();
  (*req->mutable_segments())["zone"] = "a";
  auto* pref = v.mutable_topology_request()->add_preferred();
  (*pref->mutable_segments())["rack"] = "r1";
  auto cr = create_request(v);
  CHECK(cr.name == "prod-db");
  CHECK(cr.required_bytes == (1 << 20));
  CHECK(cr.limit_bytes == (1 << 30));
  REQUIRE(cr.capabilities.size() == 2);
  CHECK(cr.capabilities[0].mode == access_mode::single_node_writer);
  CHECK(cr.capabilities[1].block);
  CHECK(cr.parameters.at("replicas") == "3");
  CHECK(cr.secrets.at("token") == "s3cret");
  REQUIRE(cr.requisite.size() == 1);
  CHECK(cr.requisite[0].at("zone") == "a");
  REQUIRE(cr.preferred.size() == 1);
  CHECK(cr.preferred[0].at("rack") == "r1");
}

TEST_CASE("translate: CreateVolume without a topology request asks for none") {
  auto cr = create_request(volume_spec());
  CHECK(cr.requisite.empty());
  CHECK(cr.preferred.empty());
  CHECK(cr.required_bytes == 0);
}

TEST_CASE("translate: a created volume takes the plugin's id, capacity, context, topology") {
  auto spec = volume_spec();
  spec.set_external_id("");
  spec.set_capacity_min(100);
  volume created;
  created.volume_id = "plugin-7";
  created.capacity_bytes = 4096;
  created.volume_context = {{"path", "/data/7"}};
  created.accessible_topology = {{{"zone", "a"}}, {{"zone", "b"}}};
  auto v = created_volume(spec, created);
  CHECK(v.external_id() == "plugin-7");
  CHECK(v.capacity_min() == 4096);
  CHECK(v.context().at("path") == "/data/7");
  CHECK(v.context().at("pool") == "fast");  // the spec's context is kept
  REQUIRE(v.accessible_topology_size() == 2);
  CHECK(v.accessible_topology(1).segments().at("zone") == "b");
  CHECK(v.id() == "db");
  CHECK(spec.external_id().empty());  // the spec itself is untouched
}

TEST_CASE("translate: a created volume keeps the requested capacity when the plugin tells none") {
  auto spec = volume_spec();
  spec.set_capacity_min(100);
  volume created;
  created.volume_id = "x";
  CHECK(created_volume(spec, created).capacity_min() == 100);
}

TEST_CASE("translate: ValidateVolumeCapabilities of a registered volume") {
  auto vr = validate_request_of(volume_spec());
  CHECK(vr.volume_id == "vol-123");
  CHECK(vr.capabilities.size() == 2);
  CHECK(vr.volume_context.at("pool") == "fast");
  CHECK(vr.parameters.at("replicas") == "3");
  CHECK(vr.secrets.at("token") == "s3cret");
}

TEST_CASE("translate: a validation answer as berth's reason") {
  CHECK(validation_reason({true, ""}) == "");
  CHECK(validation_reason({true, "ignored"}) == "");
  CHECK(validation_reason({false, ""}) == "not confirmed");
  CHECK(validation_reason({false, "no block devices"}) == "no block devices");
}

TEST_CASE("translate: a call that succeeded or found its work done is no failure") {
  CHECK_FALSE(call_failure("p", method::node_publish_volume,
                           status_of(method::node_publish_volume, code::ok)));
  CHECK_FALSE(call_failure("p", method::node_unpublish_volume,
                           status_of(method::node_unpublish_volume, code::not_found)));
  CHECK_FALSE(call_failure("p", method::controller_unpublish_volume,
                           status_of(method::controller_unpublish_volume, code::not_found)));
}

TEST_CASE("translate: a transient failure is unavailable and says retry") {
  auto f = call_failure("plugin 'hp' on node 'n1'", method::node_stage_volume,
                        status_of(method::node_stage_volume, code::unavailable, "socket gone"));
  REQUIRE(f);
  CHECK(f->code == errc::unavailable);
  CHECK(f->message ==
        "plugin 'hp' on node 'n1': NodeStageVolume failed: UNAVAILABLE: socket gone (retry)");
}

TEST_CASE("translate: INVALID_ARGUMENT is the request's fault, other finals are refusals") {
  auto bad = call_failure("p", method::create_volume,
                          status_of(method::create_volume, code::invalid_argument));
  REQUIRE(bad);
  CHECK(bad->code == errc::invalid);
  auto refused = call_failure("p", method::node_publish_volume,
                              status_of(method::node_publish_volume, code::not_found, "no vol"));
  REQUIRE(refused);
  CHECK(refused->code == errc::refused);
  CHECK(refused->message.find("NodePublishVolume failed: NOT_FOUND: no vol") != std::string::npos);
  auto denied = call_failure("p", method::controller_publish_volume,
                             status_of(method::controller_publish_volume, code::permission_denied));
  REQUIRE(denied);
  CHECK(denied->code == errc::refused);
}

TEST_CASE("translate: a failed probe step as the instance's health description") {
  CHECK(health_description(method::probe, status_of(method::probe, code::unavailable, "down")) ==
        "Probe: UNAVAILABLE: down");
}
