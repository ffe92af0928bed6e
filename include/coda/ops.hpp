// Every coda operator: argument structs, their validation, and their epilogue programs.
#pragma once

#include "coda/ops/cross_entropy.hpp"
#include "coda/ops/gemm.hpp"
#include "coda/ops/qknorm.hpp"
#include "coda/ops/rmsnorm.hpp"
#include "coda/ops/rope.hpp"
#include "coda/ops/swiglu.hpp"
