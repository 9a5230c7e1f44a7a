#pragma once

// The paths of the binaries the component tests start (node_test,
// csi_tests).  They are defined in a source CMake writes into the build
// directory (tests/CMakeLists.txt, berth_test_bins), so that the tests' own
// sources hold no path of a build directory and a clone elsewhere hits the
// compiler cache (docs/building.md).
namespace berth::test_bins {
extern const char* const hostpath;  // berth-hostpath
extern const char* const alloc;     // berth-alloc
}  // namespace berth::test_bins
