/* bench/mpi_pingpong.c: the Open MPI peer of `rdmx perf p2p` in bench/run_shm.sh
 * and bench/peers/run.sh.
 *
 *   mpirun -n 2 mpi_pingpong pingpong|stream [--size 8..64M|8,4K,1M] [--iters N] [--warmup N]
 *                            [--window N] [--bytes N] [--json PATH]
 *
 * pingpong: rank 0 MPI_Sends a message of each size to rank 1, which sends it
 * back (MPI_Recv then MPI_Send). As in ib_write_lat and rdmx's write_lat, the time
 * stamps are taken once per exchange, consecutive ones are a round trip apart,
 * and the one-way latency is half of that: p50 (perftest's t_typical), average,
 * minimum, p99.
 * stream: rank 0 MPI_Isends a window of messages of each size, rank 1 has as
 * many MPI_Irecvs posted; after each window rank 1 sends a zero-byte ack and
 * rank 0 waits for it before the next one (osu_bw's scheme). Bandwidth is the
 * bytes of all the windows over the time from the first send to the last ack,
 * in GB/s (1e9 bytes/s) and perftest's MB/s (2^20 bytes/s). As in osu_bw and
 * rdmx's write_bw, every message of a window uses the same buffer on each
 * side, so a big size costs memory once, not once per slot. The window (64)
 * shrinks for big sizes to keep at most 256 MiB in flight (4 at 64 MiB).
 *
 * Iterations: each size runs --iters exchanges (pingpong, default 10000) or
 * messages (stream, default 6400), fewer for big sizes so that about --bytes
 * move per size (default 256 MiB and 1 GiB), never fewer than 20 exchanges or
 * two windows. Warm-up (--warmup) comes first and is not timed: exchanges for
 * pingpong (default a tenth, 1000 at most), windows for stream (a tenth, 1 at
 * least).
 *
 * Output (rank 0): a table on stdout and, with --json PATH, one JSON line per
 * size appended to PATH:
 *   {"mode":"pingpong","bytes":8,"iterations":N,"p50_us":..,"avg_us":..,"min_us":..,"p99_us":..}
 *   {"mode":"stream","bytes":8,"iterations":N,"window":W,"bw_gb_s":..,"bw_mib_s":..,"msg_rate_mpps":..}
 * Exit status 0 on success, 1 on a bad argument or a data error (both ranks
 * abort together through MPI_Abort).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "size_arg.h"

#define MAX_SIZES 64
#define MAX_BYTES ((size_t)1 << 30)      /* one message at most: 1 GiB */
#define WINDOW_BYTES ((size_t)256 << 20) /* stream: bytes in flight at most */

enum mode { PINGPONG, STREAM };

struct options {
  enum mode mode;
  size_t sizes[MAX_SIZES];
  int nsizes;
  long iters;   /* upper bound on exchanges/messages per size; 0: the mode's default */
  long warmup;  /* -1: the mode's default */
  long window;  /* stream: messages in flight */
  double bytes; /* bytes to move per size, which lowers the iterations of big sizes */
  const char *json_path;
};

static int rank = -1;

/* Both ranks parse the same arguments, so only rank 0 reports a usage error;
 * a data error is reported by the rank that saw it. */
__attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...) {
  if (rank <= 0) {
    va_list args;
    va_start(args, fmt);
    fputs("mpi_pingpong: ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static long parse_count(const char *text, const char *option) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0) die("%s needs a non-negative number", option);
  return value;
}

static size_t parse_size(const char *text, size_t length) {
  size_t size = 0;
  switch (parse_size_arg(text, length, MAX_BYTES, &size)) {
    case SIZE_ARG_OK: break;
    case SIZE_ARG_MALFORMED: die("bad size in --size '%s'", text);
    case SIZE_ARG_OUT_OF_RANGE: die("size out of [1, 1 GiB] in --size '%s'", text);
  }
  return size;
}

static void add_size(struct options *o, size_t size, const char *text) {
  if (o->nsizes == MAX_SIZES) die("too many sizes in --size '%s'", text);
  o->sizes[o->nsizes++] = size;
}

/* A comma list, or a doubling range LO..HI. */
static void parse_sizes(struct options *o, const char *text) {
  o->nsizes = 0;
  const char *dots = strstr(text, "..");
  if (dots != NULL) {
    size_t low = parse_size(text, (size_t)(dots - text));
    size_t high = parse_size(dots + 2, strlen(dots + 2));
    for (size_t size = low; size <= high; size *= 2) add_size(o, size, text);
    if (o->nsizes == 0) die("empty range in --size '%s'", text);
    return;
  }
  for (const char *p = text; *p != '\0';) {
    const char *comma = strchr(p, ',');
    size_t length = comma != NULL ? (size_t)(comma - p) : strlen(p);
    add_size(o, parse_size(p, length), text);
    p += length + (comma != NULL ? 1 : 0);
  }
}

static const char *usage =
    "usage: mpirun -n 2 mpi_pingpong pingpong|stream [--size 8..64M|8,4K,1M] [--iters N] [--warmup N]\n"
    "                                [--window N] [--bytes N] [--json PATH]\n";

static void parse_options(struct options *o, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  o->warmup = -1;
  o->window = 64;
  o->bytes = 0;
  if (argc < 2) die("%s", usage);
  if (strcmp(argv[1], "pingpong") == 0) {
    o->mode = PINGPONG;
  } else if (strcmp(argv[1], "stream") == 0) {
    o->mode = STREAM;
  } else if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    if (rank == 0) fputs(usage, stdout);
    MPI_Finalize();
    exit(0);
  } else {
    die("unknown mode '%s' (pingpong or stream)", argv[1]);
  }
  parse_sizes(o, "8..64M");
  for (int i = 2; i < argc; i += 2) {
    const char *arg = argv[i];
    if (i + 1 >= argc) die("%s needs a value", arg);
    const char *value = argv[i + 1];
    if (strcmp(arg, "--size") == 0) {
      parse_sizes(o, value);
    } else if (strcmp(arg, "--iters") == 0) {
      o->iters = parse_count(value, arg);
    } else if (strcmp(arg, "--warmup") == 0) {
      o->warmup = parse_count(value, arg);
    } else if (strcmp(arg, "--window") == 0) {
      o->window = parse_count(value, arg);
    } else if (strcmp(arg, "--bytes") == 0) {
      o->bytes = (double)parse_count(value, arg);
    } else if (strcmp(arg, "--json") == 0) {
      o->json_path = value;
    } else {
      die("unknown option '%s'", arg);
    }
  }
  if (o->window < 1) die("--window must be at least 1");
  if (o->iters == 0) o->iters = o->mode == PINGPONG ? 10000 : 64 * 100;
  if (o->bytes == 0) o->bytes = o->mode == PINGPONG ? 256.0 * (1 << 20) : 1024.0 * (1 << 20);
  if (o->iters < 2) die("--iters must be at least 2");
}

/* At most `iters`, fewer where `bytes` is reached first, never under `floor`. */
static long iterations_for(const struct options *o, size_t size, long floor) {
  double by_bytes = o->bytes / (double)size;
  long n = by_bytes < (double)o->iters ? (long)by_bytes : o->iters;
  return n < floor ? floor : n;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void fill(unsigned char *buffer, size_t size, unsigned salt) {
  for (size_t i = 0; i < size; ++i) buffer[i] = (unsigned char)((i + salt) % 251);
}

static void check(const unsigned char *buffer, size_t size, unsigned salt, const char *what) {
  for (size_t i = 0; i < size; ++i) {
    if (buffer[i] != (unsigned char)((i + salt) % 251)) {
      fprintf(stderr, "mpi_pingpong: rank %d: wrong byte at offset %zu of a %zu-byte %s message\n", rank, i, size,
              what);
      MPI_Abort(MPI_COMM_WORLD, 1);
      exit(1);
    }
  }
}

static void run_pingpong(const struct options *o, unsigned char *send, unsigned char *recv, FILE *json) {
  const int peer = 1 - rank;
  if (rank == 0) {
    printf("# mpi_pingpong pingpong: one-way latency = RTT/2, usec\n");
    printf("# %10s %10s %10s %10s %10s %10s\n", "bytes", "iters", "p50", "average", "min", "p99");
  }
  for (int s = 0; s < o->nsizes; ++s) {
    const size_t size = o->sizes[s];
    const long iters = iterations_for(o, size, 20);
    const long warmup = o->warmup >= 0 ? o->warmup : (iters / 10 < 1000 ? iters / 10 : 1000);
    const long total = warmup + iters + 1;
    double *stamps = malloc((size_t)total * sizeof *stamps);
    if (stamps == NULL) die("out of memory");
    fill(send, size, 1u + (unsigned)rank);
    memset(recv, 0, size);
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < total; ++i) {
      if (rank == 0) {
        stamps[i] = now_us();
        MPI_Send(send, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(recv, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(recv, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(send, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      }
    }
    check(recv, size, 1u + (unsigned)peer, "pingpong");
    if (rank == 0) {
      /* Stamp i+1 - stamp i is one round trip; the warm-up ones are dropped. */
      const long n = iters;
      double *half = malloc((size_t)n * sizeof *half);
      if (half == NULL) die("out of memory");
      double sum = 0;
      for (long i = 0; i < n; ++i) {
        half[i] = (stamps[warmup + i + 1] - stamps[warmup + i]) / 2;
        sum += half[i];
      }
      qsort(half, (size_t)n, sizeof *half, compare_doubles);
      const double p50 = half[n / 2], avg = sum / (double)n, min = half[0];
      long p99_index = (long)((double)n * 0.99 + 0.999999) - 1;
      if (p99_index < 0) p99_index = 0;
      if (p99_index >= n) p99_index = n - 1;
      const double p99 = half[p99_index];
      printf("  %10zu %10ld %10.3f %10.3f %10.3f %10.3f\n", size, iters, p50, avg, min, p99);
      if (json != NULL) {
        fprintf(json,
                "{\"mode\":\"pingpong\",\"bytes\":%zu,\"iterations\":%ld,\"p50_us\":%.4f,\"avg_us\":%.4f,"
                "\"min_us\":%.4f,\"p99_us\":%.4f}\n",
                size, iters, p50, avg, min, p99);
        fflush(json);
      }
      free(half);
    }
    free(stamps);
  }
}

static void run_stream(const struct options *o, unsigned char *send, unsigned char *recv, FILE *json) {
  const int peer = 1 - rank;
  MPI_Request *requests = malloc((size_t)o->window * sizeof *requests);
  if (requests == NULL) die("out of memory");
  if (rank == 0) {
    printf("# mpi_pingpong stream: rank 0 -> rank 1, a window of MPI_Isend then a 0-byte ack\n");
    printf("# %10s %10s %8s %12s %12s %12s\n", "bytes", "messages", "window", "GB/s(1e9)", "MB/s(2^20)", "Mmsg/s");
  }
  for (int s = 0; s < o->nsizes; ++s) {
    const size_t size = o->sizes[s];
    /* At most WINDOW_BYTES in flight: 64 x 64 MiB would take seconds a window. */
    long window = (long)(WINDOW_BYTES / size);
    window = window < 1 ? 1 : window > o->window ? o->window : window;
    long messages = iterations_for(o, size, 2 * window);
    const long windows = (messages + window - 1) / window;
    messages = windows * window;
    const long warmup = o->warmup >= 0 ? o->warmup : (windows / 10 > 1 ? windows / 10 : 1); /* windows */
    fill(send, size, 7);
    memset(recv, 0, size);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = 0;
    for (long w = 0; w < warmup + windows; ++w) {
      if (w == warmup) start = now_us();
      if (rank == 0) {
        for (long i = 0; i < window; ++i) {
          MPI_Isend(send, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &requests[i]);
        }
        MPI_Waitall((int)window, requests, MPI_STATUSES_IGNORE);
        MPI_Recv(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        for (long i = 0; i < window; ++i) {
          MPI_Irecv(recv, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &requests[i]);
        }
        MPI_Waitall((int)window, requests, MPI_STATUSES_IGNORE);
        MPI_Send(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
      }
    }
    const double seconds = (now_us() - start) / 1e6;
    if (rank == 1) check(recv, size, 7, "stream");
    if (rank == 0) {
      const double bytes = (double)messages * (double)size;
      const double gb_s = bytes / seconds / 1e9;
      const double mib_s = bytes / seconds / (1024.0 * 1024.0);
      const double mpps = (double)messages / seconds / 1e6;
      printf("  %10zu %10ld %8ld %12.3f %12.2f %12.4f\n", size, messages, window, gb_s, mib_s, mpps);
      if (json != NULL) {
        fprintf(json,
                "{\"mode\":\"stream\",\"bytes\":%zu,\"iterations\":%ld,\"window\":%ld,\"bw_gb_s\":%.4f,"
                "\"bw_mib_s\":%.3f,\"msg_rate_mpps\":%.6f}\n",
                size, messages, window, gb_s, mib_s, mpps);
        fflush(json);
      }
    }
  }
  free(requests);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct options o;
  parse_options(&o, argc, argv);
  if (world != 2) die("runs with exactly 2 ranks (mpirun -n 2), not %d", world);

  size_t largest = 0;
  for (int s = 0; s < o.nsizes; ++s) largest = o.sizes[s] > largest ? o.sizes[s] : largest;
  unsigned char *send = malloc(largest);
  unsigned char *recv = malloc(largest);
  if (send == NULL || recv == NULL) die("out of memory");
  memset(send, 0, largest); /* touch every page before timing */
  memset(recv, 0, largest);
  FILE *json = NULL;
  if (rank == 0 && o.json_path != NULL) {
    json = fopen(o.json_path, "a");
    if (json == NULL) die("cannot open --json file '%s'", o.json_path);
  }

  if (o.mode == PINGPONG) {
    run_pingpong(&o, send, recv, json);
  } else {
    run_stream(&o, send, recv, json);
  }

  if (json != NULL) fclose(json);
  free(send);
  free(recv);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
