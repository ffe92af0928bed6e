// The validation helpers every operator uses: messages name the argument and the rule.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include <cuda_runtime_api.h>

#include "coda/capi_util.hpp"
#include "coda/check.hpp"
#include "coda/coda.h"
#include "coda/host.hpp"

namespace coda {
namespace {


std::string fails(const ArgCheck& c) {
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), CODA_ERROR_INVALID_ARGUMENT);
  return c.status().message();
}

TEST(Check, AcceptsAGoodTensor) {
  HostTensor t = HostTensor::matrix(DType::kBF16, 4, 16);
  ArgCheck c("op");
  c.tensor("x", t, {4, 16}, kStoreTypes, Layout::kRowMajor16);
  EXPECT_TRUE(c.ok()) << c.status().message();
}

TEST(Check, NamesTheArgumentAndTheRule) {
  HostTensor t = HostTensor::matrix(DType::kBF16, 4, 16);
  {
    ArgCheck c("myop");
    c.tensor("x", t, {4, 15}, kStoreTypes);
    EXPECT_EQ(fails(c), "myop: argument 'x' must have shape [4, 15], got [4, 16]");
  }
  {
    ArgCheck c("myop");
    c.tensor("x", t, {4, 16}, kFP32Only);
    EXPECT_EQ(fails(c), "myop: argument 'x' must have dtype fp32, got bf16");
  }
  {
    ArgCheck c("myop");
    c.tensor("x", t, {64}, kStoreTypes);
    EXPECT_EQ(fails(c), "myop: argument 'x' must have rank 1, got rank 2");
  }
  {
    ArgCheck c("myop");
    c.tensor("x", TensorView(), {4, 16}, kStoreTypes);
    EXPECT_EQ(fails(c), "myop: argument 'x' is required but its data pointer is null");
  }
}

TEST(Check, OptionalMayBeAbsentButIsCheckedWhenPresent) {
  HostTensor t = HostTensor::matrix(DType::kFP32, 2, 4);
  ArgCheck ok("op");
  ok.optional("r", TensorView(), {2, 4}, kFP32Only);
  EXPECT_TRUE(ok.ok());
  ArgCheck bad("op");
  bad.optional("r", t, {3, 4}, kFP32Only);
  EXPECT_NE(fails(bad).find("argument 'r' must have shape [3, 4]"), std::string::npos);
}

TEST(Check, SixteenByteRows) {
  HostTensor t = HostTensor::matrix(DType::kBF16, 4, 7);  // 14-byte rows
  ArgCheck c("op");
  c.tensor("d", t, {4, 7}, kStoreTypes, Layout::kRowMajor16);
  EXPECT_NE(fails(c).find("rows must start on 16-byte boundaries"), std::string::npos);
  HostTensor padded = HostTensor::matrix(DType::kBF16, 4, 7, 8);  // padded to 16 bytes: fine
  ArgCheck c2("op");
  c2.tensor("d", padded, {4, 7}, kStoreTypes, Layout::kRowMajor16);
  EXPECT_TRUE(c2.ok()) << c2.status().message();
}

TEST(Check, MisalignedPointer) {
  HostTensor t = HostTensor::matrix(DType::kBF16, 4, 16);
  TensorView v = t.view();
  v.desc.data = static_cast<char*>(v.desc.data) + 2;
  v.desc.sizes[1] = 8;
  ArgCheck c("op");
  c.tensor("d", v, {4, 8}, kStoreTypes, Layout::kRowMajor16);
  EXPECT_NE(fails(c).find("data pointer must be 16-byte aligned"), std::string::npos);
}

TEST(Check, GemmOperandAcceptsBothMajors) {
  HostTensor t = HostTensor::matrix(DType::kBF16, 16, 24);
  ArgCheck c("op");
  c.tensor("a", t.view(), {16, 24}, kGemmInputTypes, Layout::kGemmOperand)
      .tensor("at", t.view().transposed(), {24, 16}, kGemmInputTypes, Layout::kGemmOperand);
  EXPECT_TRUE(c.ok()) << c.status().message();
  TensorView strided = t.view();
  strided.desc.strides[1] = 2;
  strided.desc.sizes[1] = 12;
  ArgCheck bad("op");
  bad.tensor("a", strided, {16, 12}, kGemmInputTypes, Layout::kGemmOperand);
  EXPECT_NE(fails(bad).find("must have a unit stride in one dimension"), std::string::npos);
}

TEST(Check, Aliasing) {
  HostTensor buf = HostTensor::matrix(DType::kBF16, 8, 16);
  const TensorView all = buf.view();
  const TensorView top = all.row_slice(0, 4), bottom = all.row_slice(4, 4), mid = all.row_slice(2, 4);
  {
    ArgCheck c("op");
    c.no_alias({{"out", top}}, {{"in", bottom}});
    EXPECT_TRUE(c.ok());
  }
  {
    ArgCheck c("op");
    c.no_alias({{"out", mid}}, {{"in", bottom}});
    EXPECT_EQ(fails(c), "op: argument 'out' overlaps input 'in': outputs must not alias inputs");
  }
  {
    ArgCheck c("op");
    c.no_alias({{"o1", top}, {"o2", mid}}, {});
    EXPECT_EQ(fails(c), "op: argument 'o2' overlaps output 'o1': outputs must not alias each other");
  }
  {  // in place: the very same view is allowed, a partial overlap is not
    ArgCheck same("op");
    same.no_alias({{"out", top}}, {{"in", top}}, {{"out", "in"}});
    EXPECT_TRUE(same.ok());
    ArgCheck partial("op");
    partial.no_alias({{"out", mid}}, {{"in", top}}, {{"out", "in"}});
    EXPECT_NE(fails(partial).find("may be updated in place of 'in' only as the very same view"), std::string::npos);
  }
}

TEST(CApi, StatusStringsAndDescriptors) {
  EXPECT_STREQ(coda_status_string(CODA_SUCCESS), "success");
  EXPECT_STREQ(coda_status_string(CODA_ERROR_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(coda_status_string(CODA_ERROR_NOT_SUPPORTED), "not supported");
  EXPECT_STREQ(coda_dtype_name(CODA_DTYPE_BF16), "bf16");
  EXPECT_EQ(coda_dtype_size(CODA_DTYPE_FP32), 4u);
  int x[6];
  const coda_tensor_t t = coda_tensor_2d(x, CODA_DTYPE_INT32, 2, 3, 3);
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(t.sizes[0], 2);
  EXPECT_EQ(t.strides[0], 3);
  EXPECT_EQ(t.strides[1], 1);
  EXPECT_STREQ(coda_version_string(), "0.1.0");
}

TEST(CApi, DeviceCheckExplainsItself) {
  const coda_status_t s = coda_device_check(0);
  if (s != CODA_SUCCESS) {
    EXPECT_TRUE(s == CODA_ERROR_NOT_SUPPORTED || s == CODA_ERROR_INVALID_ARGUMENT) << coda_status_string(s);
    EXPECT_NE(std::string(coda_last_error()).find("coda_device_check"), std::string::npos);
  }
  EXPECT_NE(coda_device_check(-1), CODA_SUCCESS);
}

// Where a C ABI call runs: the one rule (detail::common_place), with a locator that pretends some
// addresses are device memory, so the rule is tested without a GPU.
namespace fake {
int device_mem[4];  // "device" memory
int host_mem[4];
int broken[1];      // CUDA "cannot answer" for this one
Status locate(const void* p, detail::Place* place) {
  if (p == broken) return Status::cuda_error("a fake CUDA error");
  *place = p == device_mem || p == device_mem + 1 ? detail::Place::kDevice : detail::Place::kHost;
  return {};
}
}  // namespace fake

TEST(CApi, ACallRunsWhereItsTensorsLive) {
  using detail::Place;
  coda_tensor_t a{}, b{}, out{};
  a.data = fake::device_mem;
  b.data = fake::device_mem + 1;
  out.data = fake::host_mem;
  Place place = Place::kHost;
  // All device memory (absent operands ignored): the GPU.
  ASSERT_TRUE(detail::common_place("op", {{"a", &a}, {"rstd", nullptr}, {"b", &b}}, &place, fake::locate).ok());
  EXPECT_EQ(place, Place::kDevice);
  // All host memory, raw pointers included: the emulator.
  ASSERT_TRUE(detail::common_place("op", {{"out", &out}, {"workspace", fake::host_mem + 2}}, &place, fake::locate).ok());
  EXPECT_EQ(place, Place::kHost);
  // A mix names the first argument that differs and the one it differs from.
  Status s = detail::common_place("gemm_swiglu", {{"a", &a}, {"b", &b}, {"o_out", &out}}, &place, fake::locate);
  EXPECT_EQ(s.code(), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("gemm_swiglu: argument 'o_out' points to host memory but argument 'a' to device memory"),
            std::string::npos)
      << s.message();
  s = detail::common_place("op", {{"out", &out}, {"b", &b}}, &place, fake::locate);
  EXPECT_NE(s.message().find("argument 'b' points to device memory but argument 'out' to host memory"),
            std::string::npos)
      << s.message();
  // Nothing given: host (validation then names the missing tensor).
  ASSERT_TRUE(detail::common_place("op", {{"a", nullptr}}, &place, fake::locate).ok());
  EXPECT_EQ(place, Place::kHost);
  // CUDA failing to answer is an error naming the argument, never a guess.
  coda_tensor_t c{};
  c.data = fake::broken;
  s = detail::common_place("op", {{"a", &a}, {"c", &c}}, &place, fake::locate);
  EXPECT_EQ(s.code(), CODA_ERROR_CUDA);
  EXPECT_NE(s.message().find("op: argument 'c': a fake CUDA error"), std::string::npos) << s.message();
}

// The real locator: host memory is host memory, with or without a GPU and driver.
TEST(CApi, HostMemoryIsHost) {
  std::vector<float> v(8);
  void* heap = std::malloc(64);
  for (const void* p : {static_cast<const void*>(v.data()), static_cast<const void*>(&v), static_cast<const void*>(heap)}) {
    detail::Place place = detail::Place::kDevice;
    const Status s = detail::place_of(p, &place);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(place, detail::Place::kHost);
  }
  std::free(heap);
  // With a device, no CUDA error is left behind for the caller's next CUDA call. (Without a driver,
  // every CUDA runtime call reports the missing driver; there is nothing to clear.)
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  }
}

}  // namespace
}  // namespace coda
