#pragma once

// `bbcluster serve`: the cluster kept up, evaluating what clients submit (docs/serving.md).
// One thread owns the ZeroMQ socket the clients talk to, and a planner thread reads each
// request (its trace, its kernels) so that the socket's thread never waits on a file; the slots are a node's evaluators
// behind a slot pool (actors/slot_pool.hpp) that shares them fairly between clients; each
// request runs as a sweep of its own (coordinator, generator of the request's kernels,
// reporter writing the request's folder) over stand-in evaluators that ask the pool.

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/config.hpp"
#include "messages/records.hpp"
#include "suite/suite.hpp"

namespace bb {

/// What a request's `evaluate` message asks for, checked: the suite's operators it selects,
/// each with its kernel, and the settings it runs with. Made without any actor, so that every
/// refusal (a bad setting, a name that selects nothing, a kernel without its entry point)
/// is answered before anything starts.
struct serve_request {
  std::string id;
  suite work;
  /// One per operator of `work`, in its order: the kernel given under the name that
  /// selected it.
  std::vector<std::pair<std::string, artefact>> kernels;
  settings s;
};

/// Reads an `evaluate` message against the server's settings `base`; "" or why it cannot run,
/// naming the field (and operator) at fault.
std::string read_request(const nlohmann::json& msg, const settings& base, serve_request& out);

/// The entry point a kernel for `op_name` defines unless its request names another:
/// BackendBench's folder name of the operator with "_kernel_impl" ("relu_kernel_impl" for
/// aten.relu.default, "add__Tensor_kernel_impl" for aten.add.Tensor).
std::string default_entry(const std::string& op_name);

/// A name safe as one path component: letters, digits, '-', '_' and '.' kept, others '_';
/// never "", "." or "..".
std::string path_component(const std::string& name);

/// `bbcluster submit PATH... [flags]` (argv without "submit"): sends the kernels of PATH (a
/// kernel file, or a folder in the directory backend's layout) to a running `bbcluster serve`
/// as one request, prints each operator's result as it arrives and BackendBench's score lines
/// at the end. Exit status: 0 once the request is done, 1 when it was cancelled or failed, 2
/// for a bad command line or a refused request, 130 after SIGINT (the request is cancelled).
int submit_main(const std::vector<std::string>& args);

/// `bbcluster serve [flags]` (argv without "serve"): runs until SIGINT or SIGTERM; the exit
/// status: 2 for a bad command line or a server that cannot start, else 128 + the signal.
int serve_main(const std::vector<std::string>& args);

} // namespace bb
