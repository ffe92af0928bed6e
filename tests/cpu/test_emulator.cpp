// Every emulated operator against the float64 reference, under design.md's tolerance rule:
// the fused result's relative Frobenius error must be at most 2x that of the unfused bf16 pipeline
// (the same math with a bf16 rounding at every tensor an unfused graph stores) plus 1e-4.
// Fresh random inputs, poisoned outputs checked fully written, awkward shapes, several tile grains.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "coda/host.hpp"
#include "coda/ops.hpp"
#include "coda/ref/emulator.hpp"
#include "util.hpp"
#include "common/op_prelude.hpp"

namespace coda {
namespace {

// Shapes: (M, N, K), tiny, non-multiples of 64/128 and a multi-tile one.
const std::vector<Shape> kShapes = {{1, 8, 8}, {7, 72, 24}, {129, 40, 72}, {33, 264, 16}};
const std::vector<emu::EmuConfig> kGrains = {{128, 256}, {16, 32}, {3, 8}};

class Emulator : public ::testing::Test {};
#define CODA_OPS emu
#define CODA_OP_SUITE Emulator
#define CODA_OPS_BACKWARD 1
const std::vector<emu::EmuConfig> kQkGrains = {emu::EmuConfig{128, 256}, emu::EmuConfig{16, 32}};
const std::vector<int64_t> kQkHeadDims = {16, 64, 128};

#include "common/op_tests.inc"

}  // namespace
}  // namespace coda
