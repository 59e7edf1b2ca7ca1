// SPDX-License-Identifier: MIT
// Letting go of Python's interpreter lock while rdmx waits on other
// processes: what is waited for may run Python on another thread (a
// future's callbacks), and the waits (connecting, agreeing, tearing down)
// can last up to the timeout.
#pragma once

#include <Python.h>

namespace rdmx::torch_backend {

// Runs `fn` without the interpreter lock when this thread holds it, and
// returns what it returns; the lock is taken back however `fn` ends.
template <class Fn>
decltype(auto) without_gil(Fn&& fn) {
  struct Released {
    PyThreadState* saved = nullptr;
    ~Released() {
      if (saved != nullptr) PyEval_RestoreThread(saved);
    }
  } released;
  if (Py_IsInitialized() && PyGILState_Check()) released.saved = PyEval_SaveThread();
  return fn();
}

}  // namespace rdmx::torch_backend
