// What every includer of tests/common/op_tests.inc declares before defining its shapes and grains:
// the reference types, the test helpers, the dtype shorthands and the (M, N, K) shape.
#pragma once

#include <cstdint>

#include "coda/ref/reference.hpp"
#include "cpu/util.hpp"

namespace coda {
namespace {

using ref::Mat;
using ref::Vec;
using test::output;
using test::random_tensor;
using test::rounded;
using test::within_rule;

constexpr DType kBF16 = DType::kBF16;
constexpr DType kFP32 = DType::kFP32;

struct Shape {
  int64_t m, n, k;
};

}  // namespace
}  // namespace coda
