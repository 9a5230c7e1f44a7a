#include "apps/berth/volume_init.hpp"

namespace berth {

namespace {

// The two forms hold the same keys and values (tests/shell_test.cpp parses
// both and compares them).
constexpr const char* yaml_example =
    R"(# A volume spec for `berth volume create FILE` (or `berth volume register FILE`).
# Fill in plugin_id and the values you need. A key without a value is not set.

# The volume's id in its namespace (required).
id: db
# A display name (CreateVolume gets NAMESPACE-ID as its name, the same on every retry).
name: database
# The volume's namespace (default "default"; berth --namespace overrides it).
namespace: default
# The CSI plugin of the volume (required): a plugin `berth plugin status` lists
# (berthd --dev runs berth-hostpath as "hostpath").
plugin_id: hostpath
# volume register only (required there): the plugin's id of a volume that exists.
# volume create leaves it out: the plugin chooses it.
external_id:
# How the volume may be used (required, at least one access and attachment mode).
capabilities:
  # single-node-reader-only, single-node-writer, multi-node-reader-only,
  # multi-node-single-writer or multi-node-multi-writer.
  - access_mode: single-node-writer
    # file-system or block-device.
    attachment_mode: file-system
# How the node calls mount the volume.
mount_options:
  # The file system type.
  fs_type: ext4
  # Flags for mounting the volume.
  mount_flags: [noatime]
# Passed to the plugin on every call that takes secrets; never shown or logged.
secrets:
  example_secret: xyzzy
# Passed to CreateVolume; fixed once the volume is registered.
parameters:
  tier: fast
# The volume context, passed to the node calls; may change.
context:
  share: /exports/db
# Where the volume must (required) and should (preferred) be accessible: lists of
# topology segments as the plugin's nodes report them, e.g.
#   required:
#     - segments: {zone: a}
# Empty lists: anywhere.
topology_request:
  # A controller in one of these creates the volume; it is accessible in one of them.
  required: []
  # In this order of preference.
  preferred: []
# volume create: the capacity asked of CreateVolume, in bytes or with a unit
# (KB, MB, GB, TB, KiB, MiB, GiB, TiB); 0 or no value: the plugin's choice.
capacity_min: 1GiB
# The largest capacity the volume may have.
capacity_max: 10GiB
# volume create only: restore this snapshot of the plugin (berth volume snapshot
# list shows them). Exclusive with clone_id.
snapshot_id:
# volume create only: clone this volume (a berth volume id, same namespace and
# plugin). Exclusive with snapshot_id.
clone_id:
# A volume group: an alloc that claims a volume of the group is placed only on
# a node from which every volume of the group is accessible.
group:
)";

constexpr const char* json_example = R"({
  "id": "db",
  "name": "database",
  "namespace": "default",
  "plugin_id": "hostpath",
  "external_id": null,
  "capabilities": [
    {
      "access_mode": "single-node-writer",
      "attachment_mode": "file-system"
    }
  ],
  "mount_options": {
    "fs_type": "ext4",
    "mount_flags": ["noatime"]
  },
  "secrets": {
    "example_secret": "xyzzy"
  },
  "parameters": {
    "tier": "fast"
  },
  "context": {
    "share": "/exports/db"
  },
  "topology_request": {
    "required": [],
    "preferred": []
  },
  "capacity_min": "1GiB",
  "capacity_max": "10GiB",
  "snapshot_id": null,
  "clone_id": null,
  "group": null
}
)";

}  // namespace

std::string volume_spec_example(spec_format format) {
  return format == spec_format::json ? json_example : yaml_example;
}

std::string default_example_file(spec_format format) {
  return format == spec_format::json ? "volume.json" : "volume.yaml";
}

}  // namespace berth
