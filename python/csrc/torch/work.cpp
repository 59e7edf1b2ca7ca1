// SPDX-License-Identifier: MIT
#include "work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

namespace rdmx::torch_backend {

std::exception_ptr torch_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error&) {
    return error;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::InvalidArgument) return std::make_exception_ptr(c10::Error(e.what()));
    return std::make_exception_ptr(c10::DistBackendError(e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(c10::DistBackendError(std::string("rdmx: ") + e.what()));
  } catch (...) {
    return std::make_exception_ptr(c10::DistBackendError("rdmx: an operation failed with an unknown exception"));
  }
}

RdmxWork::RdmxWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::vector<c10::Device> devices)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::move(devices))) {}

bool RdmxWork::wait(std::chrono::milliseconds timeout) {
  if (work_.valid()) {
    try {
      if (timeout > std::chrono::milliseconds(0)) {
        work_.wait(timeout);
      } else {
        work_.wait();
      }
    } catch (const Error& e) {
      // The operation's own failure was recorded by complete() before its
      // Work completed; only a wait that ran out is news here.
      if (!isCompleted()) std::rethrow_exception(torch_error(std::current_exception()));
    }
  }
  std::lock_guard lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void RdmxWork::complete(std::exception_ptr error) {
  if (error) error = torch_error(error);
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace rdmx::torch_backend
