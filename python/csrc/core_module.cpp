// SPDX-License-Identifier: MIT
// rdmx._core: what the Python package needs from the library without torch:
// the version, the `rdmx info --json` document, and what the launcher told
// this process (for torch's env:// variables under mpirun and Slurm).
#include <pybind11/pybind11.h>

#include "rdmx/bootstrap.hpp"
#include "rdmx/info.hpp"
#include "rdmx/version.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "rdmx library bindings that do not need torch";
  m.attr("__version__") = rdmx::version();
  m.def(
      "info_json", [] { return rdmx::info_json(-1); }, py::call_guard<py::gil_scoped_release>(),
      "The `rdmx info --json` document as JSON text");
  m.def(
      "detect_launch",
      [] {
        const rdmx::LaunchInfo info = rdmx::detect_launch();
        py::dict d;
        d["launcher"] = info.launcher;
        d["rank"] = info.rank;
        d["world_size"] = info.world_size;
        d["local_rank"] = info.local_rank;
        d["local_world_size"] = info.local_world_size;
        d["store_host"] = info.store_host;
        d["store_port"] = info.store_port;
        d["store_file"] = info.store_file;
        return d;
      },
      "What the launcher (rdmx run, torchrun, Open MPI, MPICH, Slurm) told this process; raises RuntimeError "
      "when none is recognised or its variables are incomplete");
}
