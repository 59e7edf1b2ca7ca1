/* bench/coll/mpi_coll_perf.c: the Open MPI peer of `rdmx perf coll` (bench/run_coll.sh).
 *
 *   mpirun -np N mpi_coll_perf --op all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all|
 *                                   gather|scatter|barrier
 *                              [--sizes 4,4K,64K,1M,16M,64M] [--type fp32] [--redop sum|prod|min|max|avg]
 *                              [--root 0] [--iters N] [--warmup N] [--check 0|1] [--json PATH]
 *
 * The three collective benchmarks (`rdmx perf coll`, tools/rdmx/perf/perf_coll.cpp,
 * which began as bench/coll/rdmx_coll_perf.cpp; this file;
 * bench/coll/torch_coll_perf.py) measure the same way and print the same
 * table, after nccl-tests. The two peers take the flags above (those of the
 * old rdmx_coll_perf); `rdmx perf coll` spells them as nccl-tests does
 * (`all_reduce -d float -o sum -r 0 -c 1 -n N -w N --sizes ...`):
 *
 * - Size: bytes per rank as in nccl-tests: the buffer for all_reduce, broadcast
 *   and reduce; the receive buffer in total for all_gather and gather (each rank
 *   sends size/type/np elements); the send buffer in total for reduce_scatter
 *   and scatter; the whole send (= receive) buffer for all_to_all. The "count"
 *   column is the count passed to the call (per rank where the call takes one
 *   per rank), and the "size" column is the larger of send and receive bytes.
 * - Bandwidth: algbw = size / time (GB = 1e9 bytes); busbw = algbw x factor,
 *   nccl-tests' factors: all_reduce 2(n-1)/n; all_gather, reduce_scatter,
 *   all_to_all, and also gather and scatter (nccl-tests' gather.cu and
 *   scatter.cu) (n-1)/n; broadcast and reduce 1.
 * - Timing: a barrier, then `iters` back-to-back calls; each rank's time per
 *   call, averaged over the ranks (nccl-tests' default -a 1). Iterations: --iters,
 *   or per size from a calibration: 5 untimed calls, a barrier, 3 timed calls;
 *   iters = 0.2 s / (rank 0's time per call), at least 5, at most 10000, rank
 *   0's choice broadcast. Warm-up: --warmup, or
 *   max(5, iters / 10) untimed calls before the timed ones.
 * - Out-of-place and in-place rows, as nccl-tests. In place means MPI_IN_PLACE:
 *   all_reduce, reduce_scatter, reduce, all_to_all work on the receive buffer
 *   (reduce_scatter's result is its first block); all_gather and gather take
 *   this rank's block of the receive buffer as input; scatter's root keeps its
 *   own block where it is (every rank receives into block `rank` of a full-size
 *   buffer). broadcast is in place only, barrier has no buffer: their other
 *   column is n/a.
 * - Check (--check 1, after the timed calls of each row): inputs get small
 *   integers that depend on rank and index, outputs a sentinel, one call, then
 *   every output element is compared with the result computed here; #wrong is
 *   the number of wrong elements summed over the ranks. Reductions use
 *   ((rank+1)*(i%7+1)) % 16 (prod: 1 + that % 2, so products stay exact), data
 *   movement (rank*17 + i*5 + 3) % 101; all results are exact in every type
 *   (avg, floating types only, is compared to within one rounding).
 * - Output (rank 0): the table on stdout; with --json PATH one JSON object per
 *   size and row appended to PATH: {"bench","transport","op","np","bytes",
 *   "count","type","redop","root","inplace","time_us","algbw_GBps",
 *   "busbw_GBps","wrong","iters"}.
 * - Exit status: 0; 1 an error; 2 a bad argument; 3 a combination this library
 *   cannot run (type, redop); 4 wrong results.
 *
 * MPI specifics: fp16 and bf16 have no MPI datatype in Open MPI 4.1, nor avg a
 * reduction op: both exit 3. The transport in the JSON comes from the btl that
 * mpirun passed (OMPI_MCA_btl: vader, tcp, or default).
 */
#include "mpi_coll_perf.h"

int rank = -1, nranks = 0;

void quit(int status, const char *fmt, ...) {
  if (rank <= 0) {
    va_list args;
    va_start(args, fmt);
    fputs("mpi_coll_perf: ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
  }
  /* Every rank parses the same arguments and reaches the same verdict. */
  MPI_Finalize();
  exit(status);
}

void die(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "mpi_coll_perf: rank %d: ", rank);
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
  va_end(args);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------- */
/* The calls. */

static MPI_Datatype mpi_type(enum type_kind t) {
  switch (t) {
    case T_INT8: return MPI_INT8_T;
    case T_UINT8: return MPI_UINT8_T;
    case T_INT32: return MPI_INT32_T;
    case T_UINT32: return MPI_UINT32_T;
    case T_INT64: return MPI_INT64_T;
    case T_UINT64: return MPI_UINT64_T;
    case T_FP32: return MPI_FLOAT;
    case T_FP64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(enum redop_kind r) {
  switch (r) {
    case R_SUM: return MPI_SUM;
    case R_PROD: return MPI_PROD;
    case R_MIN: return MPI_MIN;
    case R_MAX: return MPI_MAX;
    default: return MPI_OP_NULL;
  }
}

struct buffers {
  unsigned char *send; /* send_elems of the largest size */
  unsigned char *recv; /* max(send_elems, recv_elems) of the largest size */
};

/* Where the input and the output of a call are, for this rank (see the header). */
static void placement(const struct options *o, const struct layout *l, const struct buffers *b, int inplace,
                      unsigned char **in, unsigned char **out) {
  const size_t block = l->count * type_sizes[o->type];
  *in = b->send;
  *out = b->recv;
  if (!inplace) return;
  *in = b->recv;
  switch (o->op) {
    case ALL_GATHER:
    case GATHER: *in = b->recv + (size_t)rank * block; break;
    case SCATTER: *out = b->recv + (size_t)rank * block; break;
    default: break;
  }
}

static void run_once(const struct options *o, const struct layout *l, const struct buffers *b, int inplace) {
  unsigned char *in, *out;
  placement(o, l, b, inplace, &in, &out);
  const MPI_Datatype t = mpi_type(o->type);
  const int count = (int)l->count;
  const MPI_Op op = mpi_op(o->redop);
  const int root = o->root, is_root = rank == o->root;
  int rc = MPI_SUCCESS;
  switch (o->op) {
    case ALL_REDUCE: rc = MPI_Allreduce(inplace ? MPI_IN_PLACE : in, out, count, t, op, MPI_COMM_WORLD); break;
    case ALL_GATHER: rc = MPI_Allgather(inplace ? MPI_IN_PLACE : in, count, t, out, count, t, MPI_COMM_WORLD); break;
    case REDUCE_SCATTER:
      rc = MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : in, out, count, t, op, MPI_COMM_WORLD);
      break;
    case BROADCAST: rc = MPI_Bcast(out, count, t, root, MPI_COMM_WORLD); break;
    case REDUCE:
      rc = MPI_Reduce(inplace && is_root ? MPI_IN_PLACE : in, out, count, t, op, root, MPI_COMM_WORLD);
      break;
    case ALL_TO_ALL: rc = MPI_Alltoall(inplace ? MPI_IN_PLACE : in, count, t, out, count, t, MPI_COMM_WORLD); break;
    case GATHER:
      rc = MPI_Gather(inplace && is_root ? MPI_IN_PLACE : in, count, t, out, count, t, root, MPI_COMM_WORLD);
      break;
    case SCATTER:
      rc = MPI_Scatter(in, count, t, inplace && is_root ? MPI_IN_PLACE : out, count, t, root, MPI_COMM_WORLD);
      break;
    case BARRIER: rc = MPI_Barrier(MPI_COMM_WORLD); break;
    case OP_COUNT: break;
  }
  if (rc != MPI_SUCCESS) die("%s failed (MPI error %d)", op_names[o->op], rc);
}

/* Seconds per call on this rank, averaged over the ranks. */
static double time_calls(const struct options *o, const struct layout *l, const struct buffers *b, int inplace,
                         long iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = now_s();
  for (long i = 0; i < iters; ++i) run_once(o, l, b, inplace);
  double mine = (now_s() - start) / (double)iters, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / nranks;
}

/* Iterations for a size: --iters, or enough for TARGET_SECONDS by rank 0's calibration. */
static long iterations_for(const struct options *o, const struct layout *l, const struct buffers *b, int inplace) {
  if (o->iters > 0) return o->iters;
  long iters = 0;
  for (int i = 0; i < CALIBRATION_WARMUP; ++i) run_once(o, l, b, inplace);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = now_s();
  for (int i = 0; i < CALIBRATION_ITERS; ++i) run_once(o, l, b, inplace);
  const double per_call = (now_s() - start) / CALIBRATION_ITERS;
  if (rank == 0) {
    const double want = per_call > 0 ? ceil(TARGET_SECONDS / per_call) : MAX_ITERS;
    iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (long)want;
  }
  MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return iters;
}

/* Fill inputs and outputs, run once, count wrong elements over all ranks. */
static long long check_once(const struct options *o, const struct layout *l, const struct buffers *b, int inplace) {
  if (o->op == BARRIER) {
    run_once(o, l, b, inplace);
    return 0;
  }
  const enum type_kind t = o->type;
  const size_t n = l->count, total = l->send_elems > l->recv_elems ? l->send_elems : l->recv_elems;
  unsigned char *in, *out;
  placement(o, l, b, inplace, &in, &out);
  for (size_t i = 0; i < l->send_elems; ++i) store(b->send, t, i, SENTINEL);
  for (size_t i = 0; i < total; ++i) store(b->recv, t, i, SENTINEL);
  const int is_root = rank == o->root;
  switch (o->op) {
    case ALL_REDUCE:
    case REDUCE:
    case REDUCE_SCATTER:
      for (size_t i = 0; i < l->send_elems; ++i) store(in, t, i, (double)reduce_input(rank, i, o->redop));
      break;
    case ALL_GATHER:
    case GATHER:
      for (size_t i = 0; i < n; ++i) store(in, t, i, (double)move_input(rank, i));
      break;
    case BROADCAST:
      if (is_root)
        for (size_t i = 0; i < n; ++i) store(out, t, i, (double)move_input(rank, i));
      break;
    case ALL_TO_ALL:
      for (size_t i = 0; i < l->send_elems; ++i) store(in, t, i, (double)move_input(rank, i));
      break;
    case SCATTER:
      if (is_root) {
        for (size_t i = 0; i < l->send_elems; ++i) store(in, t, i, (double)move_input(rank, i));
      }
      break;
    default: break;
  }
  run_once(o, l, b, inplace);
  long long wrong = 0;
  switch (o->op) {
    case ALL_REDUCE:
    case REDUCE:
      if (o->op == ALL_REDUCE || is_root) {
        for (size_t i = 0; i < n; ++i) wrong += !same(load(out, t, i), expected_reduction(i, o), o);
      }
      break;
    case REDUCE_SCATTER:
      for (size_t i = 0; i < n; ++i) wrong += !same(load(out, t, i), expected_reduction((size_t)rank * n + i, o), o);
      break;
    case ALL_GATHER:
    case GATHER:
      if (o->op == ALL_GATHER || is_root) {
        for (int r = 0; r < nranks; ++r) {
          for (size_t i = 0; i < n; ++i)
            wrong += load(out, t, (size_t)r * n + i) != as_type(t, (double)move_input(r, i));
        }
      }
      break;
    case BROADCAST:
      for (size_t i = 0; i < n; ++i) wrong += load(out, t, i) != as_type(t, (double)move_input(o->root, i));
      break;
    case ALL_TO_ALL:
      for (int r = 0; r < nranks; ++r) {
        for (size_t i = 0; i < n; ++i) {
          wrong += load(out, t, (size_t)r * n + i) != as_type(t, (double)move_input(r, (size_t)rank * n + i));
        }
      }
      break;
    case SCATTER:
      for (size_t i = 0; i < n; ++i) {
        wrong += load(out, t, i) != as_type(t, (double)move_input(o->root, (size_t)rank * n + i));
      }
      break;
    default: break;
  }
  long long total_wrong = 0;
  MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total_wrong;
}

/* ------------------------------------------------------------------------- */
/* Output. */

static void format_time(char *out, size_t size, double us) {
  if (us < 10)
    snprintf(out, size, "%.3f", us);
  else if (us < 100)
    snprintf(out, size, "%.2f", us);
  else if (us < 10000)
    snprintf(out, size, "%.1f", us);
  else
    snprintf(out, size, "%.0f", us);
}

static void format_bw(char *out, size_t size, double gbps) { snprintf(out, size, gbps < 10 ? "%.3f" : "%.2f", gbps); }

static const char *transport_name(void) {
  const char *btl = getenv("OMPI_MCA_btl");
  if (btl == NULL) return "default";
  if (strstr(btl, "vader") != NULL || strstr(btl, "sm") != NULL) return "vader";
  if (strstr(btl, "tcp") != NULL) return "tcp";
  return btl;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct options o;
  parse_options(&o, argc, argv);
  const enum op_kind op = o.op;
  if (o.type == T_FP16 || o.type == T_BF16) {
    quit(EXIT_UNSUPPORTED, "unsupported: Open MPI has no MPI datatype for %s", type_names[o.type]);
  }
  if (is_reduction(op) && o.redop == R_AVG) quit(EXIT_UNSUPPORTED, "unsupported: MPI has no avg reduction");
  const size_t esize = type_sizes[o.type];
  const char *transport = transport_name();
  if (op == BARRIER) {
    o.nsizes = 1;
    o.sizes[0] = 0;
  }

  size_t send_max = 0, recv_max = 0;
  for (int s = 0; s < o.nsizes; ++s) {
    const struct layout l = layout_for(op, o.sizes[s], esize, nranks);
    if (l.send_elems > send_max) send_max = l.send_elems;
    const size_t both = l.send_elems > l.recv_elems ? l.send_elems : l.recv_elems;
    if (both > recv_max) recv_max = both;
  }
  struct buffers b;
  b.send = malloc(send_max * esize + 64);
  b.recv = malloc(recv_max * esize + 64);
  if (b.send == NULL || b.recv == NULL) die("out of memory");
  memset(b.send, 0, send_max * esize + 64); /* touch every page before timing */
  memset(b.recv, 0, recv_max * esize + 64);
  FILE *json = NULL;
  if (rank == 0 && o.json_path != NULL) {
    json = fopen(o.json_path, "a");
    if (json == NULL) die("cannot open --json file '%s': %s", o.json_path, strerror(errno));
  }

  const char *redop_col = is_reduction(op) ? redop_names[o.redop] : "none";
  const int root_col = is_rooted(op) ? o.root : -1;
  if (rank == 0) {
    int length = 0;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(version, &length);
    char *newline = strchr(version, '\n');
    if (newline != NULL) *newline = '\0';
    char *comma = strchr(version, ',');
    if (comma != NULL) *comma = '\0';
    printf("# mpi_coll_perf: %s, %d ranks, transport %s (%s)\n", op_names[op], nranks, transport, version);
    if (o.iters > 0) {
      printf("# iters %ld", o.iters);
    } else {
      printf("# iters: per size, %.1f s worth (%d..%d)", TARGET_SECONDS, MIN_ITERS, MAX_ITERS);
    }
    if (o.warmup >= 0) {
      printf(", warmup %ld", o.warmup);
    } else {
      printf(", warmup max(5, iters/10)");
    }
    printf(", check %d; time = per call, averaged over ranks; GB = 1e9 B\n#\n", o.check);
    printf("# %10s  %12s  %6s  %6s  %6s  %32s  %32s\n", "", "", "", "", "", "out-of-place", "in-place");
    printf("# %10s  %12s  %6s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s  %7s\n", "size", "count", "type",
           "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "iters");
    printf("# %10s  %12s  %6s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s  %7s\n", "(B)", "(elements)", "", "",
           "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "");
  }

  long long all_wrong = 0;
  double bw_sum = 0;
  int bw_count = 0;
  for (int s = 0; s < o.nsizes; ++s) {
    const struct layout l = layout_for(op, o.sizes[s], esize, nranks);
    if (op != BARRIER && l.count == 0) {
      if (rank == 0) printf("# %zu B: less than one %s per rank, skipped\n", o.sizes[s], type_names[o.type]);
      continue;
    }
    const int first_mode = has_mode(op, 0) ? 0 : 1;
    const long iters = iterations_for(&o, &l, &b, first_mode);
    const long warmup = o.warmup >= 0 ? o.warmup : (iters / 10 > 5 ? iters / 10 : 5);
    char cells[2][192];
    for (int inplace = 0; inplace <= 1; ++inplace) {
      if (!has_mode(op, inplace)) {
        snprintf(cells[inplace], sizeof cells[inplace], "  %8s  %7s  %7s  %6s", "n/a", "n/a", "n/a", "n/a");
        continue;
      }
      for (long i = 0; i < warmup; ++i) run_once(&o, &l, &b, inplace);
      const double seconds = time_calls(&o, &l, &b, inplace, iters);
      const long long wrong = o.check ? check_once(&o, &l, &b, inplace) : -1;
      if (wrong > 0) all_wrong += wrong;
      const double us = seconds * 1e6;
      const double algbw = seconds > 0 ? (double)l.bytes / 1e9 / seconds : 0;
      const double busbw = algbw * bus_factor(op, nranks);
      bw_sum += busbw;
      ++bw_count;
      if (rank == 0) {
        char t[32], a[32], u[32], w[32];
        format_time(t, sizeof t, us);
        format_bw(a, sizeof a, algbw);
        format_bw(u, sizeof u, busbw);
        if (wrong >= 0)
          snprintf(w, sizeof w, "%lld", wrong);
        else
          snprintf(w, sizeof w, "n/a");
        snprintf(cells[inplace], sizeof cells[inplace], "  %8s  %7s  %7s  %6s", t, a, u, w);
        if (json != NULL) {
          char wrong_json[32];
          if (wrong >= 0)
            snprintf(wrong_json, sizeof wrong_json, "%lld", wrong);
          else
            snprintf(wrong_json, sizeof wrong_json, "null");
          fprintf(json,
                  "{\"bench\":\"mpi\",\"transport\":\"%s\",\"op\":\"%s\",\"np\":%d,\"bytes\":%zu,\"count\":%zu,"
                  "\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"inplace\":%s,\"time_us\":%.4f,"
                  "\"algbw_GBps\":%.6f,\"busbw_GBps\":%.6f,\"wrong\":%s,\"iters\":%ld}\n",
                  transport, op_names[op], nranks, l.bytes, l.count, type_names[o.type], redop_col, root_col,
                  inplace ? "true" : "false", us, algbw, busbw, wrong_json, iters);
          fflush(json);
        }
      }
    }
    if (rank == 0) {
      printf("  %10zu  %12zu  %6s  %6s  %6d%s%s  %7ld\n", l.bytes, l.count, type_names[o.type], redop_col, root_col,
             cells[0], cells[1], iters);
    }
  }
  if (rank == 0) {
    printf("# Out of bounds values : %lld %s\n", all_wrong,
           o.check ? (all_wrong == 0 ? "OK" : "FAILED") : "(not checked)");
    printf("# Avg bus bandwidth    : %.4g\n#\n", bw_count > 0 ? bw_sum / bw_count : 0.0);
  }
  if (json != NULL) fclose(json);
  free(b.send);
  free(b.recv);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return all_wrong > 0 ? EXIT_WRONG : 0;
}
