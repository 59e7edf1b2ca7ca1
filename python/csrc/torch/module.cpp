// SPDX-License-Identifier: MIT
// rdmx._torch: the backend class for Python. rdmx/torch.py registers it with
// torch.distributed under the name "rdmx".
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <torch/version.h>

#include "backend.hpp"
#include "rdmx/profile.hpp"

namespace py = pybind11;

using rdmx::torch_backend::ProcessGroupRdmx;

PYBIND11_MODULE(_torch, m) {
  m.doc() = "The rdmx backend for torch.distributed";
  // The base class must be known to pybind11 before ours derives from it.
  py::module_::import("torch.distributed");
  m.attr("torch_version_built") = TORCH_VERSION;
#ifdef RDMX_TORCH_CUDA
  m.attr("cuda_built") = true;
#else
  m.attr("cuda_built") = false;
#endif
  py::class_<ProcessGroupRdmx, c10d::Backend, c10::intrusive_ptr<ProcessGroupRdmx>>(m, "ProcessGroupRdmx")
      .def(py::init(
               [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
                 return c10::make_intrusive<ProcessGroupRdmx>(store, rank, size, timeout);
               }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>(),
           "Joins the group: rendezvous through `store` (torch's) and connect every pair within `timeout`")
      .def_property_readonly("peer_providers", &ProcessGroupRdmx::peer_providers,
                             "How each peer is reached ('shm', 'tcp', ...; '' for this rank)")
      .def_property_readonly("timeout", &ProcessGroupRdmx::timeout)
      .def("agree_failures", &ProcessGroupRdmx::agree_failures,
           "The ranks of this group the survivors agree have failed (the list shrink_group needs)")
      .def("grow", &ProcessGroupRdmx::grow, py::arg("count"), py::arg("store"),
           "Collective: room for `count` new processes (join_group) in `store`; returns (rank, size, prefix) of the "
           "grown group, which the next init_process_group with that rank and size takes");
  m.def("join_group", &rdmx::torch_backend::join_group, py::arg("store"), py::arg("tag"), py::arg("timeout"),
        "A new process's place in a running job that grows: (rank, size, prefix), taken by the next "
        "init_process_group with that rank and size");
  m.def("profile_step", &rdmx::profile::step,
        "End the current training step in RDMX_PROFILE's trace (after the optimizer, on every rank)");
  m.def("profile_describe", &rdmx::profile::describe, py::arg("samples_per_step"), py::arg("parameters") = 0.0,
        "Record samples per step per rank and the parameter count in RDMX_PROFILE's trace");
  m.attr("profile_enabled") = rdmx::profile::enabled();
}
