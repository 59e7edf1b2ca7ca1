// SPDX-License-Identifier: MIT
// rdmx/status.hpp: a running job seen from outside it, through its store
// (`rdmx status`, `python -m rdmx status`).
//
// Every rank writes, for each of its communicators, a record of itself into
// the job's store (docs/OBSERVING.md, "Rank status in the store"). These
// calls only read those records: the job never waits for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rdmx/bootstrap.hpp"

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

// The rank status records `store` holds now, as JSON texts, in key order,
// each with the key it was found under added as "key" (a reader of another
// kind of store adds it the same way). Needs a store that lists its keys
// (Store::keys); a record removed while it is read is left out.
std::vector<std::string> read_status_records(Store& store);

// What the records say of the job at `now_ms` (Unix time, ms), as a JSON
// document (docs/schemas/status.schema.json): per communicator (records
// under one key prefix, else of one tag), each rank's
// host, device, current or last collective and seconds since its last
// progress; the collective under way and who has not called it; and the
// slowest rank of the last collectives, the one the others waited for
// (from when each rank entered each collective). Malformed records are
// listed under "unreadable", not fatal.
std::string job_status_json(const std::vector<std::string>& records, std::int64_t now_ms);

// The same document as text for a terminal.
std::string describe_job_status(const std::string& job_status_json);

}  // namespace rdmx

RDMX_API_END
