// SPDX-License-Identifier: MIT
// coll/reduce.hpp: the element-wise reduction kernels the collectives use.
//
// Every (type, op) has a scalar kernel and, on x86-64, AVX2 and AVX-512
// kernels chosen at run time (functions compiled with target attributes, so
// the binary runs on any x86-64). All kernels of one (type, op) give the same
// bits for every input, so ranks on different CPUs agree:
// - Integers: Sum and Prod wrap around (two's complement); Min/Max compare in
//   the type's signedness.
// - Floating Sum/Prod: one IEEE add/multiply in the type's precision, never
//   contracted. NaN results are defined in software, as x86 addps/mulps give
//   them with `a` as first operand: a NaN `a` gives `a` quieted, else a NaN
//   `b` gives `b` quieted, else an invalid operation (inf - inf, 0 * inf)
//   gives the x86 default NaN (fp32 0xFFC00000, fp64 0xFFF8000000000000).
//   Without NaN inputs, Sum and Prod are bitwise commutative.
// - Floating Min/Max: a NaN input gives the canonical quiet NaN (fp32
//   0x7FC00000, fp64 0x7FF8000000000000, fp16 0x7E00, bf16 0x7FC0); otherwise
//   the smaller/larger value, with min(-0, +0) = -0 and max(-0, +0) = +0 in
//   either order. Min/Max are bitwise commutative for every input.
// - fp16 and bf16: both inputs are widened to fp32 exactly, the op is applied
//   in fp32 and the result rounded once to nearest even (fp16 as F16C's
//   vcvtps2ph: overflow to inf, denormals kept, NaN quieted with its upper
//   payload; bf16 likewise, NaN quieted by setting 0x0040).
// - ReduceOp::Avg reduces as Sum; divide() applies the division once at the end.
//
// The floating kernels use the hardware's add/multiply, so they follow the
// calling thread's MXCSR (rounding mode, FTZ/DAZ) like any other arithmetic;
// with the default MXCSR every path gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "rdmx/comm.hpp"
#include "rdmx/half.hpp"

namespace rdmx::coll {

// dst[i] = a[i] (op) b[i] for i < count. dst may be the same pointer as a or
// b (never a partial overlap). Pointers need the element's natural alignment
// only (no vector alignment).
using ReduceFn = void (*)(void* dst, const void* a, const void* b, std::size_t count);
// dst[i] = dst[i] / divisor for i < count (one floating type).
using DivideFn = void (*)(void* dst, std::size_t count, int divisor);

// The kernel for (type, op) of the ISA reduce_isa() names; nullptr for an
// out-of-range type or op. Chosen once per process.
ReduceFn reduce_function(DataType type, ReduceOp op);
// reduce_function(type, op)(dst, a, b, count); throws Error(InvalidArgument)
// for an out-of-range type or op.
void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op);

// dst[i] = dst[i] / divisor, floating types only: fp32 divides by
// float(divisor), fp64 by double(divisor), fp16/bf16 in fp32 rounded once.
// A NaN stays NaN (quieted). Throws Error(InvalidArgument) for integer types
// and for divisor == 0.
void divide(void* dst, std::size_t count, DataType type, int divisor);

// "avx512", "avx2" or "scalar": the ISA reduce_function picks, the best this
// CPU has (avx512: avx512f+bw+vl with avx2 and f16c; avx2: avx2+f16c), capped
// by RDMX_REDUCE_ISA=scalar|avx2|avx512 when set (asking for more than the
// CPU has caps at what it has, with a warning; an unknown value is ignored
// with a warning). Read once per process.
const char* reduce_isa();

// For tests and benches: the kernel of one ISA ("scalar", "avx2", "avx512"),
// or nullptr when this CPU (or build) lacks it, or for an unknown name or an
// out-of-range type or op. Not affected by RDMX_REDUCE_ISA.
ReduceFn reduce_function_for(const char* isa, DataType type, ReduceOp op);
// The same for divide(); nullptr for integer types too.
DivideFn divide_function_for(const char* isa, DataType type);

// The scalar conversions (rdmx/half.hpp), one definition for the library and the tools.
using rdmx::bf16_to_float;
using rdmx::float_to_bf16;
using rdmx::float_to_half;
using rdmx::half_to_float;

namespace detail {

// Per-ISA kernel tables (nullptr for an out-of-range type or op, and for
// integer types in the divide tables). They do not check the CPU.
ReduceFn scalar_reduce(DataType type, ReduceOp op) noexcept;
DivideFn scalar_divide(DataType type) noexcept;
#if defined(__x86_64__)
ReduceFn avx2_reduce(DataType type, ReduceOp op) noexcept;
DivideFn avx2_divide(DataType type) noexcept;
ReduceFn avx512_reduce(DataType type, ReduceOp op) noexcept;
DivideFn avx512_divide(DataType type) noexcept;
#endif

// The ISA RDMX_REDUCE_ISA=`requested` (nullptr or empty: unset) selects on a
// CPU whose best is `best`; sets `warning` (else clears it) when the request
// is capped or unknown. Pure, for tests.
const char* choose_reduce_isa(const char* requested, const char* best, std::string& warning);
// The best ISA this CPU supports.
const char* best_reduce_isa() noexcept;

}  // namespace detail
}  // namespace rdmx::coll
