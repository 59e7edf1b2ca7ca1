/* bench/coll/mpi_coll_model.c: what each collective moves and how fast that
 * is, and the elements mpi_coll_perf fills and checks.
 *
 * SPDX-License-Identifier: MIT
 */
#include "mpi_coll_perf.h"

/* ------------------------------------------------------------------------- */
/* Operations: what each moves, and how fast that is. */

int is_reduction(enum op_kind op) { return op == ALL_REDUCE || op == REDUCE_SCATTER || op == REDUCE; }
int is_rooted(enum op_kind op) { return op == BROADCAST || op == REDUCE || op == GATHER || op == SCATTER; }

/* Which rows this library has: broadcast is in place only, barrier has no buffer. */
int has_mode(enum op_kind op, int inplace) {
  if (op == BARRIER) return !inplace;
  if (op == BROADCAST) return inplace;
  return 1;
}

struct layout layout_for(enum op_kind op, size_t bytes, size_t esize, int n) {
  struct layout l = {0, 0, 0, 0};
  const size_t per_rank = bytes / esize / (size_t)n;
  switch (op) {
    case ALL_REDUCE:
    case BROADCAST:
    case REDUCE:
      l.count = bytes / esize;
      l.send_elems = l.recv_elems = l.count;
      break;
    case ALL_GATHER:
    case GATHER:
      l.count = per_rank;
      l.send_elems = per_rank;
      l.recv_elems = per_rank * (size_t)n;
      break;
    case REDUCE_SCATTER:
    case SCATTER:
      l.count = per_rank;
      l.send_elems = per_rank * (size_t)n;
      l.recv_elems = per_rank;
      break;
    case ALL_TO_ALL:
      l.count = per_rank;
      l.send_elems = l.recv_elems = per_rank * (size_t)n;
      break;
    case BARRIER:
    case OP_COUNT: break;
  }
  l.bytes = (l.send_elems > l.recv_elems ? l.send_elems : l.recv_elems) * esize;
  return l;
}

double bus_factor(enum op_kind op, int n) {
  switch (op) {
    case ALL_REDUCE: return 2.0 * (n - 1) / n;
    case ALL_GATHER:
    case REDUCE_SCATTER:
    case ALL_TO_ALL:
    case GATHER:
    case SCATTER: return (double)(n - 1) / n;
    default: return 1.0;
  }
}

/* ------------------------------------------------------------------------- */
/* Elements: stored and read back through a double (every value here is a
 * small integer, or an average of them). */

void store(void *buf, enum type_kind t, size_t i, double v) {
  switch (t) {
    case T_INT8: ((int8_t *)buf)[i] = (int8_t)(int64_t)v; break;
    case T_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    case T_INT32: ((int32_t *)buf)[i] = (int32_t)(int64_t)v; break;
    case T_UINT32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v; break;
    case T_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case T_UINT64: ((uint64_t *)buf)[i] = (uint64_t)(int64_t)v; break;
    case T_FP32: ((float *)buf)[i] = (float)v; break;
    case T_FP64: ((double *)buf)[i] = v; break;
    default: die("type %s has no storage here", type_names[t]);
  }
}

double load(const void *buf, enum type_kind t, size_t i) {
  switch (t) {
    case T_INT8: return ((const int8_t *)buf)[i];
    case T_UINT8: return ((const uint8_t *)buf)[i];
    case T_INT32: return ((const int32_t *)buf)[i];
    case T_UINT32: return ((const uint32_t *)buf)[i];
    case T_INT64: return (double)((const int64_t *)buf)[i];
    case T_UINT64: return (double)((const uint64_t *)buf)[i];
    case T_FP32: return ((const float *)buf)[i];
    case T_FP64: return ((const double *)buf)[i];
    default: die("type %s has no storage here", type_names[t]);
  }
  return 0;
}

/* The value as the type holds it (integers wrap, floats round). */
double as_type(enum type_kind t, double v) {
  unsigned char cell[8];
  store(cell, t, 0, v);
  return load(cell, t, 0);
}

/* The check patterns, the same in the three benchmarks. */
int64_t reduce_input(int r, size_t i, enum redop_kind redop) {
  const int64_t base = ((int64_t)(r + 1) * (int64_t)(i % 7 + 1)) % 16;
  return redop == R_PROD ? 1 + base % 2 : base;
}
int64_t move_input(int r, size_t i) { return ((int64_t)r * 17 + (int64_t)(i % 101) * 5 + 3) % 101; }

double expected_reduction(size_t i, const struct options *o) {
  int64_t acc = reduce_input(0, i, o->redop);
  for (int r = 1; r < nranks; ++r) {
    const int64_t v = reduce_input(r, i, o->redop);
    switch (o->redop) {
      case R_SUM:
      case R_AVG: acc += v; break;
      case R_PROD: acc *= v; break;
      case R_MIN: acc = v < acc ? v : acc; break;
      case R_MAX: acc = v > acc ? v : acc; break;
      default: break;
    }
  }
  if (o->redop == R_AVG) return as_type(o->type, (double)acc / nranks);
  /* Integers wrap as the library's arithmetic does; small floats are exact. */
  return as_type(o->type, (double)acc);
}

int same(double got, double want, const struct options *o) {
  if (o->redop == R_AVG && is_reduction(o->op)) {
    const double tolerance = o->type == T_FP32 ? 1e-6 : o->type == T_FP64 ? 1e-12 : 1e-2;
    return fabs(got - want) <= tolerance * (fabs(want) > 1 ? fabs(want) : 1);
  }
  return got == want;
}
