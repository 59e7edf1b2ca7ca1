// SPDX-License-Identifier: MIT
#include "coll/comm_device_order.hpp"

namespace rdmx::coll {

StreamTicket DeviceOrder::enter(CollOp op, int gpu, bool in_task) {
  // A task's own calls are part of it, a host function: ordering them on
  // the stream when the task runs would wait for work queued after the
  // task's call, behind operations that run only after the task.
  if (gpu < 0 || in_task || stream_ == nullptr) return StreamTicket();
  return order_.enter(stream_, gpu, to_string(op));
}

}  // namespace rdmx::coll
