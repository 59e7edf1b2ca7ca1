/* bench/coll/mpi_coll_args.c: mpi_coll_perf's command line.
 *
 * SPDX-License-Identifier: MIT
 */
#include "mpi_coll_perf.h"

#include "../size_arg.h"

/* ------------------------------------------------------------------------- */
/* Arguments. */

static long parse_count(const char *text, const char *option) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0)
    quit(EXIT_USAGE, "%s needs a non-negative number", option);
  return value;
}

static size_t parse_size(const char *text, size_t length) {
  size_t size = 0;
  switch (parse_size_arg(text, length, MAX_BYTES, &size)) {
    case SIZE_ARG_OK: break;
    case SIZE_ARG_MALFORMED: quit(EXIT_USAGE, "bad size in --sizes '%s'", text);
    case SIZE_ARG_OUT_OF_RANGE: quit(EXIT_USAGE, "size out of [1, 4G] in --sizes '%s'", text);
  }
  return size;
}

static void parse_sizes(struct options *o, const char *text) {
  o->nsizes = 0;
  for (const char *p = text; *p != '\0';) {
    const char *comma = strchr(p, ',');
    size_t length = comma != NULL ? (size_t)(comma - p) : strlen(p);
    if (o->nsizes == MAX_SIZES) quit(EXIT_USAGE, "too many sizes in --sizes '%s'", text);
    o->sizes[o->nsizes++] = parse_size(p, length);
    p += length + (comma != NULL ? 1 : 0);
  }
  if (o->nsizes == 0) quit(EXIT_USAGE, "no size in --sizes '%s'", text);
}

static int lookup(const char *const *names, int n, const char *value, const char *option) {
  for (int i = 0; i < n; ++i) {
    if (strcmp(names[i], value) == 0) return i;
  }
  if (strcmp(option, "--type") == 0 && strcmp(value, "float") == 0) return T_FP32;
  quit(EXIT_USAGE, "unknown %s '%s'", option, value);
  return -1;
}

static const char *usage =
    "usage: mpirun -np N mpi_coll_perf --op all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all|\n"
    "                                       gather|scatter|barrier\n"
    "           [--sizes 4,4K,64K,1M,16M,64M] [--type int8|uint8|int32|uint32|int64|uint64|fp32|fp64]\n"
    "           [--redop sum|prod|min|max] [--root 0] [--iters N] [--warmup N] [--check 0|1] [--json PATH]\n";

void parse_options(struct options *o, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  o->op = ALL_REDUCE;
  o->type = T_FP32;
  o->redop = R_SUM;
  o->warmup = -1;
  o->check = 1;
  parse_sizes(o, "4,4K,64K,1M,16M,64M");
  for (int i = 1; i < argc; i += 2) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      if (rank == 0) fputs(usage, stdout);
      MPI_Finalize();
      exit(0);
    }
    if (i + 1 >= argc) quit(EXIT_USAGE, "%s needs a value\n%s", arg, usage);
    const char *value = argv[i + 1];
    if (strcmp(arg, "--op") == 0) {
      o->op = (enum op_kind)lookup(op_names, OP_COUNT, value, arg);
    } else if (strcmp(arg, "--sizes") == 0 || strcmp(arg, "--size") == 0) {
      parse_sizes(o, value);
    } else if (strcmp(arg, "--type") == 0) {
      o->type = (enum type_kind)lookup(type_names, TYPE_COUNT, value, arg);
    } else if (strcmp(arg, "--redop") == 0) {
      o->redop = (enum redop_kind)lookup(redop_names, REDOP_COUNT, value, arg);
    } else if (strcmp(arg, "--root") == 0) {
      o->root = (int)parse_count(value, arg);
    } else if (strcmp(arg, "--iters") == 0) {
      o->iters = parse_count(value, arg);
      if (o->iters < 1) quit(EXIT_USAGE, "--iters must be at least 1");
    } else if (strcmp(arg, "--warmup") == 0) {
      o->warmup = parse_count(value, arg);
    } else if (strcmp(arg, "--check") == 0) {
      o->check = (int)parse_count(value, arg) != 0;
    } else if (strcmp(arg, "--json") == 0) {
      o->json_path = value;
    } else {
      quit(EXIT_USAGE, "unknown option '%s'\n%s", arg, usage);
    }
  }
  if (o->root >= nranks) quit(EXIT_USAGE, "--root %d is not a rank of %d", o->root, nranks);
}
