// SPDX-License-Identifier: MIT
// Facts about other processes of this host.
#pragma once

namespace rdmx::core {

// Whether process `pid` is gone: no such pid, or a zombie its parent has
// not reaped yet (a killed peer stays one until its launcher waits for it).
bool process_gone(int pid);

}  // namespace rdmx::core
