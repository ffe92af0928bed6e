// Internal: turning a C++ Status into a C ABI return (records the message for coda_last_error).
#pragma once

#include "coda/tensor.hpp"

namespace coda::detail {

coda_status_t report(const Status& s);

}  // namespace coda::detail
