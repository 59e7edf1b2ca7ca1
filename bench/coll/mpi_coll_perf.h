/* bench/coll/mpi_coll_perf.h: the parts of the Open MPI peer of `rdmx perf
 * coll` (mpi_coll_perf.c, the calls and the output; mpi_coll_args.c, the
 * command line; mpi_coll_model.c, what each collective moves and the check
 * patterns), mirroring tools/rdmx/perf/perf_coll*.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef RDMX_BENCH_MPI_COLL_PERF_H
#define RDMX_BENCH_MPI_COLL_PERF_H

#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 64
#define MAX_BYTES ((size_t)1 << 32)
#define TARGET_SECONDS 0.2
#define MIN_ITERS 5
#define MAX_ITERS 10000
#define CALIBRATION_WARMUP 5
#define CALIBRATION_ITERS 3

enum { EXIT_USAGE = 2, EXIT_UNSUPPORTED = 3, EXIT_WRONG = 4 };

enum op_kind {
  ALL_REDUCE,
  ALL_GATHER,
  REDUCE_SCATTER,
  BROADCAST,
  REDUCE,
  ALL_TO_ALL,
  GATHER,
  SCATTER,
  BARRIER,
  OP_COUNT
};
static const char *const op_names[OP_COUNT] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                               "all_to_all", "gather",     "scatter",        "barrier"};

enum type_kind { T_INT8, T_UINT8, T_INT32, T_UINT32, T_INT64, T_UINT64, T_FP16, T_BF16, T_FP32, T_FP64, TYPE_COUNT };
static const char *const type_names[TYPE_COUNT] = {"int8",   "uint8", "int32", "uint32", "int64",
                                                   "uint64", "fp16",  "bf16",  "fp32",   "fp64"};
static const size_t type_sizes[TYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};

enum redop_kind { R_SUM, R_PROD, R_MIN, R_MAX, R_AVG, REDOP_COUNT };
static const char *const redop_names[REDOP_COUNT] = {"sum", "prod", "min", "max", "avg"};

struct options {
  enum op_kind op;
  size_t sizes[MAX_SIZES];
  int nsizes;
  enum type_kind type;
  enum redop_kind redop;
  int root;
  long iters;  /* 0: per size, from a calibration */
  long warmup; /* -1: max(5, iters / 10) */
  int check;
  const char *json_path;
};

struct layout {
  size_t count;      /* the count passed to the call */
  size_t send_elems; /* elements in the send buffer */
  size_t recv_elems; /* elements in the receive buffer */
  size_t bytes;      /* the size reported: max(send, recv) bytes */
};

extern int rank, nranks;

__attribute__((format(printf, 2, 3))) void quit(int status, const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void die(const char *fmt, ...);
double now_s(void);

/* mpi_coll_args.c */
void parse_options(struct options *o, int argc, char **argv);

/* mpi_coll_model.c */
int is_reduction(enum op_kind op);
int is_rooted(enum op_kind op);
int has_mode(enum op_kind op, int inplace);
struct layout layout_for(enum op_kind op, size_t bytes, size_t esize, int n);
double bus_factor(enum op_kind op, int n);
void store(void *buf, enum type_kind t, size_t i, double v);
double load(const void *buf, enum type_kind t, size_t i);
double as_type(enum type_kind t, double v);
int64_t reduce_input(int r, size_t i, enum redop_kind redop);
int64_t move_input(int r, size_t i);
#define SENTINEL (-1.0)
double expected_reduction(size_t i, const struct options *o);
int same(double got, double want, const struct options *o);

#endif
