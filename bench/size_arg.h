/* bench/size_arg.h: the byte sizes of the C peer benchmarks' command lines
 * (mpi_pingpong, mpi_coll_perf): "8", "64K", "16M", "1G", binary multiples
 * as rdmx perf and perftest read them.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef RDMX_BENCH_SIZE_ARG_H
#define RDMX_BENCH_SIZE_ARG_H

#include <stdlib.h>
#include <string.h>

enum size_arg_result { SIZE_ARG_OK, SIZE_ARG_MALFORMED, SIZE_ARG_OUT_OF_RANGE };

/* Reads text[0, length) into *out, a size from 1 to `max` bytes. */
static inline enum size_arg_result parse_size_arg(const char *text, size_t length, unsigned long long max,
                                                  size_t *out) {
  char buffer[32];
  if (length == 0 || length >= sizeof buffer) return SIZE_ARG_MALFORMED;
  memcpy(buffer, text, length);
  buffer[length] = '\0';
  unsigned shift = 0;
  switch (buffer[length - 1]) {
    case 'K':
    case 'k': shift = 10; break;
    case 'M':
    case 'm': shift = 20; break;
    case 'G':
    case 'g': shift = 30; break;
    default: break;
  }
  if (shift != 0) buffer[length - 1] = '\0';
  char *end = NULL;
  unsigned long long value = strtoull(buffer, &end, 10);
  if (end == buffer || *end != '\0' || value > (max >> shift)) {
    return end == buffer || *end != '\0' ? SIZE_ARG_MALFORMED : SIZE_ARG_OUT_OF_RANGE;
  }
  value <<= shift;
  if (value == 0) return SIZE_ARG_OUT_OF_RANGE;
  *out = (size_t)value;
  return SIZE_ARG_OK;
}

#endif
