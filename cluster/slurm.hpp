#pragma once

// What a Slurm allocation says about itself through its environment: the job, its nodes and
// the GPUs on each. The environment is passed in as a map, so tests can give their own.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bb {

/// The nodes and GPUs of the Slurm job that bbcluster runs in.
struct slurm_allocation {
  /// Host names in Slurm's order, as `scontrol show hostnames` prints them.
  std::vector<std::string> nodes;
  /// 0 when the allocation names no GPUs.
  uint32_t gpus_per_node = 0;
  std::string job_id;
};

/// This process's environment variables.
std::map<std::string, std::string> current_environment();

/// Expands a Slurm host list as `scontrol show hostnames` does: `node[01-03,07],login` is
/// node01 node02 node03 node07 login. Zero padding follows the width of each range's first
/// number; several bracket groups in one name expand left to right
/// (`rack[1-2]-n[1-2]` is rack1-n1 rack1-n2 rack2-n1 rack2-n2). On a malformed list, returns
/// nothing and sets `error` to what was wrong and at which character (1-based).
std::vector<std::string> expand_nodelist(const std::string& list, std::string& error);

/// Reads the allocation from `env`: the job from SLURM_JOB_ID, the nodes from
/// SLURM_JOB_NODELIST (or SLURM_NODELIST), GPUs per node from SLURM_GPUS_ON_NODE, else
/// SLURM_GPUS_PER_NODE (`4`, `gpu:4`, `h100:4`, `gpu:h100:4`), else the entries of
/// SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES, else 0. Empty variables count as absent. Returns
/// nullopt and sets `error` outside an allocation or when a variable is malformed.
std::optional<slurm_allocation> read_slurm_allocation(
  const std::map<std::string, std::string>& env, std::string& error);

} // namespace bb
