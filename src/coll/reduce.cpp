// SPDX-License-Identifier: MIT
// Scalar reduction kernels, fp16/bf16 conversions and the run-time dispatch.
// The AVX2 and AVX-512 kernels are in reduce_avx2.cpp and reduce_avx512.cpp.
#include "coll/reduce.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <bit>
#include <cstring>
#include <string>
#include <type_traits>

#include "coll/reduce_element.hpp"
#include "rdmx/error.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx::coll {

// ---------------------------------------------------------------------------
// Scalar kernels: one element at a time, through reduce_element.hpp.
namespace {

constexpr element::Op element_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod: return element::Op::Prod;
    case ReduceOp::Min: return element::Op::Min;
    case ReduceOp::Max: return element::Op::Max;
    default: return element::Op::Sum;
  }
}

template <class T, ReduceOp Op>
void scalar_int(void* dst, const void* a, const void* b, std::size_t count) {
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < count; ++i) d[i] = element::int_op<element_op(Op)>(x[i], y[i]);
}

template <class F, ReduceOp Op>
void scalar_float(void* dst, const void* a, const void* b, std::size_t count) {
  auto* d = static_cast<F*>(dst);
  const auto* x = static_cast<const F*>(a);
  const auto* y = static_cast<const F*>(b);
  for (std::size_t i = 0; i < count; ++i) d[i] = element::float_op<element_op(Op)>(x[i], y[i]);
}

template <class Format, ReduceOp Op>
void scalar_half(void* dst, const void* a, const void* b, std::size_t count) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  for (std::size_t i = 0; i < count; ++i) d[i] = element::half_op<element_op(Op), Format>(x[i], y[i]);
}

template <class F>
void scalar_divide_float(void* dst, std::size_t count, int divisor) {
  auto* d = static_cast<F*>(dst);
  const F v = static_cast<F>(divisor);
  for (std::size_t i = 0; i < count; ++i) d[i] = element::float_divide(d[i], v);
}

template <class Format>
void scalar_divide_half(void* dst, std::size_t count, int divisor) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const float v = static_cast<float>(divisor);
  for (std::size_t i = 0; i < count; ++i) d[i] = element::half_divide<Format>(d[i], v);
}

template <ReduceOp Op>
ReduceFn scalar_for_op(DataType type) noexcept {
  switch (type) {
    case DataType::Int8: return &scalar_int<std::int8_t, Op>;
    case DataType::Uint8: return &scalar_int<std::uint8_t, Op>;
    case DataType::Int32: return &scalar_int<std::int32_t, Op>;
    case DataType::Uint32: return &scalar_int<std::uint32_t, Op>;
    case DataType::Int64: return &scalar_int<std::int64_t, Op>;
    case DataType::Uint64: return &scalar_int<std::uint64_t, Op>;
    case DataType::Float16: return &scalar_half<element::Fp16, Op>;
    case DataType::BFloat16: return &scalar_half<element::Bf16, Op>;
    case DataType::Float32: return &scalar_float<float, Op>;
    case DataType::Float64: return &scalar_float<double, Op>;
  }
  return nullptr;
}

#if defined(__x86_64__)
// CPUID leaf 1, ECX bit 29; asked directly because clang's
// __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

}  // namespace

namespace detail {

ReduceFn scalar_reduce(DataType type, ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return scalar_for_op<ReduceOp::Sum>(type);
    case ReduceOp::Prod: return scalar_for_op<ReduceOp::Prod>(type);
    case ReduceOp::Min: return scalar_for_op<ReduceOp::Min>(type);
    case ReduceOp::Max: return scalar_for_op<ReduceOp::Max>(type);
  }
  return nullptr;
}

DivideFn scalar_divide(DataType type) noexcept {
  switch (type) {
    case DataType::Float16: return &scalar_divide_half<element::Fp16>;
    case DataType::BFloat16: return &scalar_divide_half<element::Bf16>;
    case DataType::Float32: return &scalar_divide_float<float>;
    case DataType::Float64: return &scalar_divide_float<double>;
    default: return nullptr;
  }
}

const char* best_reduce_isa() noexcept {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && cpu_has_f16c();
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return "avx512";
  if (avx2) return "avx2";
#endif
  return "scalar";
}

namespace {
int isa_rank(const char* isa) {
  if (isa == nullptr) return -1;
  if (std::strcmp(isa, "scalar") == 0) return 0;
  if (std::strcmp(isa, "avx2") == 0) return 1;
  if (std::strcmp(isa, "avx512") == 0) return 2;
  return -1;
}
}  // namespace

const char* choose_reduce_isa(const char* requested, const char* best, std::string& warning) {
  warning.clear();
  if (requested == nullptr || *requested == '\0') return best;
  const int want = isa_rank(requested);
  if (want < 0) {
    warning =
        std::string("ignoring RDMX_REDUCE_ISA=\"") + requested + "\" (expected scalar, avx2 or avx512); using " + best;
    return best;
  }
  if (want > isa_rank(best)) {
    warning =
        std::string("RDMX_REDUCE_ISA=") + requested + " but this CPU supports at most " + best + "; using " + best;
    return best;
  }
  static const char* const kNames[] = {"scalar", "avx2", "avx512"};
  return kNames[want];
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Dispatch.
namespace {

std::string isa_in_force() { return reduce_isa(); }
constexpr const char* kIsaNames[] = {"scalar", "avx2", "avx512", nullptr};
constexpr core::ChoiceSetting kReduceIsa{
    "RDMX_REDUCE_ISA", "best", kIsaNames,
    "cap the reduction kernels at scalar, avx2 or avx512 (best: the best this CPU has)", isa_in_force};
RDMX_SETTING(kReduceIsa);

bool valid(DataType type) { return static_cast<unsigned>(type) < static_cast<unsigned>(kDataTypeCount); }
bool valid(ReduceOp op) { return static_cast<unsigned>(op) < static_cast<unsigned>(kReduceOpCount); }

struct Table {
  const char* isa = "scalar";
  ReduceFn reduce[kDataTypeCount][kReduceOpCount] = {};
  DivideFn divide[kDataTypeCount] = {};

  Table() {
    const char* best = detail::best_reduce_isa();
    const auto requested = kReduceIsa.raw();
    std::string warning;
    isa = detail::choose_reduce_isa(requested ? requested->c_str() : nullptr, best, warning);
    if (!warning.empty()) RDMX_WARN("%s", warning.c_str());
    for (int t = 0; t < kDataTypeCount; ++t) {
      for (int o = 0; o < kReduceOpCount; ++o)
        reduce[t][o] = reduce_function_for(isa, static_cast<DataType>(t), static_cast<ReduceOp>(o));
      divide[t] = divide_function_for(isa, static_cast<DataType>(t));
    }
    RDMX_INFO("reduction kernels: %s (best on this CPU: %s)", isa, best);
  }
};

const Table& table() {
  static const Table instance;
  return instance;
}

}  // namespace

ReduceFn reduce_function(DataType type, ReduceOp op) {
  if (!valid(type) || !valid(op)) return nullptr;
  return table().reduce[static_cast<int>(type)][static_cast<int>(op)];
}

void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op) {
  const ReduceFn fn = reduce_function(type, op);
  if (fn == nullptr)
    throw Error(
        ErrorCode::InvalidArgument, "reduce: invalid data type or reduction op",
        {.op = "reduce",
         .sizes = "type=" + std::to_string(static_cast<int>(type)) + " op=" + std::to_string(static_cast<int>(op))});
  fn(dst, a, b, count);
}

void divide(void* dst, std::size_t count, DataType type, int divisor) {
  if (!valid(type) || !is_floating(type))
    throw Error(ErrorCode::InvalidArgument,
                std::string("divide: not a floating type: ") + (valid(type) ? to_string(type) : "invalid"),
                {.op = "divide", .hint = "ReduceOp::Avg is defined for fp16, bf16, fp32 and fp64 only"});
  if (divisor == 0) throw Error(ErrorCode::InvalidArgument, "divide: divisor is 0", {.op = "divide"});
  table().divide[static_cast<int>(type)](dst, count, divisor);
}

const char* reduce_isa() { return table().isa; }

ReduceFn reduce_function_for(const char* isa, DataType type, ReduceOp op) {
  if (!valid(type) || !valid(op)) return nullptr;
  const int want = detail::isa_rank(isa);
  if (want < 0 || want > detail::isa_rank(detail::best_reduce_isa())) return nullptr;
  if (want == 0) return detail::scalar_reduce(type, op);
#if defined(__x86_64__)
  if (want == 1) return detail::avx2_reduce(type, op);
  return detail::avx512_reduce(type, op);
#else
  return nullptr;
#endif
}

DivideFn divide_function_for(const char* isa, DataType type) {
  if (!valid(type)) return nullptr;
  const int want = detail::isa_rank(isa);
  if (want < 0 || want > detail::isa_rank(detail::best_reduce_isa())) return nullptr;
  if (want == 0) return detail::scalar_divide(type);
#if defined(__x86_64__)
  if (want == 1) return detail::avx2_divide(type);
  return detail::avx512_divide(type);
#else
  return nullptr;
#endif
}

}  // namespace rdmx::coll
