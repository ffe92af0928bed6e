// TensorView, dtypes, argument checks.
#include <algorithm>
#include <sstream>

#include "coda/check.hpp"
#include "coda/tensor.hpp"

namespace coda {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kInt32: return "int32";
  }
  return "unknown";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kFP16: return 2;
    case DType::kFP32:
    case DType::kInt32: return 4;
  }
  return 0;
}

TensorView TensorView::vector(void* data, DType dtype, int64_t n) {
  TensorView v;
  v.desc.data = data;
  v.desc.rank = 1;
  v.desc.dtype = static_cast<coda_dtype_t>(dtype);
  v.desc.sizes[0] = n;
  v.desc.strides[0] = 1;
  return v;
}

TensorView TensorView::matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride) {
  TensorView v;
  v.desc.data = data;
  v.desc.rank = 2;
  v.desc.dtype = static_cast<coda_dtype_t>(dtype);
  v.desc.sizes[0] = rows;
  v.desc.sizes[1] = cols;
  v.desc.strides[0] = row_stride < 0 ? cols : row_stride;
  v.desc.strides[1] = 1;
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < desc.rank; ++i) n *= desc.sizes[i];
  return n;
}

TensorView TensorView::transposed() const {
  TensorView t = *this;
  std::swap(t.desc.sizes[0], t.desc.sizes[1]);
  std::swap(t.desc.strides[0], t.desc.strides[1]);
  return t;
}

TensorView TensorView::row_slice(int64_t r0, int64_t n) const {
  TensorView t = *this;
  t.desc.data = static_cast<char*>(desc.data) + r0 * desc.strides[0] * static_cast<int64_t>(element_size());
  t.desc.sizes[0] = n;
  return t;
}

std::pair<uintptr_t, uintptr_t> TensorView::byte_extent() const {
  const auto base = reinterpret_cast<uintptr_t>(desc.data);
  const auto es = static_cast<int64_t>(element_size());
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < desc.rank; ++i) {
    if (desc.sizes[i] == 0) return {base, base};
    const int64_t span = desc.strides[i] * (desc.sizes[i] - 1) * es;
    (span < 0 ? lo : hi) += span;
  }
  return {static_cast<uintptr_t>(static_cast<int64_t>(base) + lo),
          static_cast<uintptr_t>(static_cast<int64_t>(base) + hi + es)};
}

bool TensorView::same_view(const TensorView& o) const {
  if (desc.data != o.desc.data || desc.rank != o.desc.rank || desc.dtype != o.desc.dtype) return false;
  for (int i = 0; i < desc.rank; ++i)
    if (desc.sizes[i] != o.desc.sizes[i] || desc.strides[i] != o.desc.strides[i]) return false;
  return true;
}

std::string TensorView::describe() const {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < desc.rank; ++i) s << (i ? ", " : "") << desc.sizes[i];
  s << "] " << dtype_name(dtype()) << ", strides (";
  for (int i = 0; i < desc.rank; ++i) s << (i ? ", " : "") << desc.strides[i];
  s << ")";
  return s.str();
}

std::string DTypeSet::describe() const {
  std::string out;
  const DType all[] = {DType::kBF16, DType::kFP16, DType::kFP32, DType::kInt32};
  int count = 0;
  for (DType d : all) count += contains(d);
  int seen = 0;
  for (DType d : all) {
    if (!contains(d)) continue;
    if (seen) out += (seen == count - 1) ? " or " : ", ";
    out += dtype_name(d);
    ++seen;
  }
  return out;
}

std::string shape_string(std::initializer_list<int64_t> shape) {
  std::ostringstream s;
  s << "[";
  int i = 0;
  for (int64_t d : shape) {
    s << (i++ ? ", " : "");
    if (d < 0) s << "*"; else s << d;
  }
  s << "]";
  return s.str();
}

// ---------------------------------------------------------------------------------------------

ArgCheck& ArgCheck::fail(const char* name, const std::string& what) {
  if (failed_.empty()) failed_ = op_ + ": argument '" + name + "' " + what;
  return *this;
}

ArgCheck& ArgCheck::rule(bool holds, const char* name, const std::string& rule) {
  if (!holds) fail(name, rule);
  return *this;
}

ArgCheck& ArgCheck::same_dtype(const char* a_name, const TensorView& a, const char* b_name, const TensorView& b) {
  if (a.defined() && b.defined() && a.dtype() != b.dtype())
    fail(b_name, std::string("must have the same dtype as '") + a_name + "' (" + dtype_name(a.dtype()) +
                     "), got " + dtype_name(b.dtype()));
  return *this;
}

ArgCheck& ArgCheck::tensor(const char* name, const TensorView& t, std::initializer_list<int64_t> shape,
                           DTypeSet dtypes, Layout layout) {
  if (!ok()) return *this;
  if (!t.defined()) return fail(name, "is required but its data pointer is null");
  check_tensor(name, t, shape, dtypes, layout);
  return *this;
}

ArgCheck& ArgCheck::optional(const char* name, const TensorView& t, std::initializer_list<int64_t> shape,
                             DTypeSet dtypes, Layout layout) {
  if (!ok() || !t.defined()) return *this;
  check_tensor(name, t, shape, dtypes, layout);
  return *this;
}

void ArgCheck::check_tensor(const char* name, const TensorView& t, std::initializer_list<int64_t> shape,
                            DTypeSet dtypes, Layout layout) {
  const int rank = static_cast<int>(shape.size());
  if (t.rank() != rank) {
    fail(name, "must have rank " + std::to_string(rank) + ", got rank " + std::to_string(t.rank()));
    return;
  }
  if (t.element_size() == 0 || !dtypes.contains(t.dtype())) {
    fail(name, "must have dtype " + dtypes.describe() + ", got " +
                   (t.element_size() ? dtype_name(t.dtype()) : "an unknown dtype"));
    return;
  }
  int i = 0;
  bool shape_ok = true;
  for (int64_t want : shape) {
    if (t.size(i) < 0 || (want >= 0 && t.size(i) != want)) shape_ok = false;
    ++i;
  }
  if (!shape_ok) {
    std::string got = "[";
    for (int d = 0; d < rank; ++d) got += (d ? ", " : "") + std::to_string(t.size(d));
    fail(name, "must have shape " + shape_string(shape) + ", got " + got + "]");
    return;
  }
  for (int d = 0; d < rank; ++d) {
    if (t.stride(d) < 0 || (t.stride(d) == 0 && t.size(d) > 1)) {
      fail(name, "must have positive strides, got " + t.describe());
      return;
    }
  }
  const auto es = static_cast<int64_t>(t.element_size());
  const auto addr = reinterpret_cast<uintptr_t>(t.data());
  if (addr % static_cast<uintptr_t>(es) != 0) {
    fail(name, "data pointer must be aligned to its element size (" + std::to_string(es) + " bytes)");
    return;
  }
  switch (layout) {
    case Layout::kAny: break;
    case Layout::kContiguous: {
      int64_t expect = 1;
      for (int d = rank - 1; d >= 0; --d) {
        if (t.size(d) > 1 && t.stride(d) != expect) {
          fail(name, "must be contiguous (dense row-major), got " + t.describe());
          return;
        }
        expect *= t.size(d);
      }
      break;
    }
    case Layout::kRowMajor16: {
      if (t.stride(1) != 1 && t.size(1) > 1) {
        fail(name, "must be row-major (unit stride along columns), got " + t.describe());
        return;
      }
      if (t.stride(0) < t.size(1)) {
        fail(name, "rows must not overlap (row stride >= columns), got " + t.describe());
        return;
      }
      if ((t.stride(0) * es) % 16 != 0 && t.size(0) > 1) {
        fail(name, "rows must start on 16-byte boundaries: row stride " + std::to_string(t.stride(0)) +
                       " elements x " + std::to_string(es) + " bytes is not a multiple of 16");
        return;
      }
      if (addr % 16 != 0) {
        fail(name, "data pointer must be 16-byte aligned");
        return;
      }
      break;
    }
    case Layout::kGemmOperand: {
      // Row-major (unit stride along dim 1) or column-major (unit stride along dim 0); a dimension
      // of size <= 1 may have any stride. The other stride is TMA's: a multiple of 16 bytes.
      auto layout_ok = [&](int unit, int lead) {
        const bool unit_ok = t.stride(unit) == 1 || t.size(unit) <= 1;
        const bool lead_ok = t.size(lead) <= 1 || ((t.stride(lead) * es) % 16 == 0 && t.stride(lead) >= t.size(unit));
        return unit_ok && lead_ok;
      };
      if (layout_ok(1, 0) || layout_ok(0, 1)) {
        if (addr % 16 != 0) {
          fail(name, "data pointer must be 16-byte aligned");
          return;
        }
        break;
      }
      const bool row_unit = t.stride(1) == 1 || t.size(1) <= 1;
      const bool col_unit = t.stride(0) == 1 || t.size(0) <= 1;
      if (!row_unit && !col_unit) {
        fail(name, "must have a unit stride in one dimension (row-major or column-major), got " + t.describe());
        return;
      }
      const int lead = row_unit ? 0 : 1;
      const int inner = 1 - lead;
      if (t.stride(lead) < t.size(inner)) {
        fail(name, "must not overlap itself (leading stride >= inner size), got " + t.describe());
        return;
      }
      fail(name, "leading stride " + std::to_string(t.stride(lead)) + " elements x " + std::to_string(es) +
                     " bytes must be a multiple of 16 bytes (TMA), got " + t.describe());
      return;
    }
  }
}

static bool overlaps(const TensorView& a, const TensorView& b) {
  const auto ea = a.byte_extent();
  const auto eb = b.byte_extent();
  if (ea.first == ea.second || eb.first == eb.second) return false;
  return ea.first < eb.second && eb.first < ea.second;
}

ArgCheck& ArgCheck::no_alias(std::initializer_list<Named> outputs, std::initializer_list<Named> inputs,
                             std::initializer_list<std::pair<const char*, const char*>> in_place) {
  if (!ok()) return *this;
  auto allowed = [&](const char* out, const char* in) {
    for (const auto& p : in_place)
      if (std::string(p.first) == out && std::string(p.second) == in) return true;
    return false;
  };
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    if (!o->view.defined()) continue;
    for (auto o2 = outputs.begin(); o2 != o; ++o2) {
      if (o2->view.defined() && overlaps(o->view, o2->view))
        return fail(o->name, std::string("overlaps output '") + o2->name + "': outputs must not alias each other");
    }
    for (const auto& in : inputs) {
      if (!in.view.defined() || !overlaps(o->view, in.view)) continue;
      if (allowed(o->name, in.name)) {
        if (!o->view.same_view(in.view))
          return fail(o->name, std::string("may be updated in place of '") + in.name +
                                   "' only as the very same view (pointer, sizes, strides, dtype); it partially overlaps it");
        continue;
      }
      return fail(o->name, std::string("overlaps input '") + in.name + "': outputs must not alias inputs");
    }
  }
  return *this;
}

}  // namespace coda
