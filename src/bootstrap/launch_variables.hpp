// SPDX-License-Identifier: MIT
// Every environment variable detect_launch() (launch.cpp) reads, for the
// code that must set or clear all of them: the launcher tests' guard and
// the launcher-environment fuzz target. A launcher added there is added here.
#pragma once

namespace rdmx::bootstrap {

inline constexpr const char* kLaunchVariables[] = {
    "RDMX_RANK",
    "RDMX_WORLD_SIZE",
    "RDMX_LOCAL_RANK",
    "RDMX_LOCAL_WORLD_SIZE",
    "RDMX_STORE",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_LOCALID",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NODEID",
};

}  // namespace rdmx::bootstrap
