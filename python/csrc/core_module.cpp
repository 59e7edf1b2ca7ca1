// SPDX-License-Identifier: MIT
// rdmx._core: what the Python package needs from the library without torch:
// the version, the `rdmx info --json` document, what the launcher told
// this process (for torch's env:// variables under mpirun and Slurm), and
// the reading of rank status records (python -m rdmx status).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "rdmx/bootstrap.hpp"
#include "rdmx/info.hpp"
#include "rdmx/status.hpp"
#include "rdmx/version.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "rdmx library bindings that do not need torch";
  m.attr("__version__") = rdmx::version();
  m.def(
      "info_json", [] { return rdmx::info_json(-1); }, py::call_guard<py::gil_scoped_release>(),
      "The `rdmx info --json` document as JSON text");
  m.def("job_status_json", &rdmx::job_status_json, py::arg("records"), py::arg("now_ms"),
        "The rdmx.status/1 document (docs/schemas/status.schema.json) of rank status records (JSON texts, each "
        "with its store key added as \"key\") at Unix time now_ms");
  m.def("describe_job_status", &rdmx::describe_job_status, py::arg("document"),
        "The rdmx.status/1 document as text for a terminal, as `rdmx status` prints it");
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
