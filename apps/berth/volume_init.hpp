// `berth volume init`: the example volume spec it writes.  Pure: the text
// only; the command (apps/berth/commands.cpp) writes it to a file.
#pragma once

#include <string>

namespace berth {

enum class spec_format { yaml, json };

// An example volume spec (as `volume create` and `volume register` read it)
// with every key of the spec: in YAML with a comment above each key, in
// JSON (which has no comments) with the same keys and values.  Accepted by
// `volume create` as it is (plugin_id names the plugin berthd --dev runs);
// the keys that only `volume register` takes (external_id) and the content
// sources (snapshot_id, clone_id) are there without a value (null).
std::string volume_spec_example(spec_format format);

// The file `volume init` writes without --output.
std::string default_example_file(spec_format format);

}  // namespace berth
