#pragma once

// The sandbox of untrusted code: kernels (in bbrunner) and compilers building kernel sources.
// A sandboxed program runs under bubblewrap (bwrap) in its own PID, network, IPC and UTS
// namespaces, sees the system read-only with the user's home, the CURVE keys, the run folder
// and the kernel cache hidden, writes only to a private /tmp and a scratch folder of bounded
// size, sees only the device nodes it is given, and runs under limits on processes, file
// size, open files and memory, with core dumps off. Started by root, it runs as an
// unprivileged user (the kernel does not hold root to its process limit).
//
// sandbox_command() only builds bwrap's argument list from a plain description; nothing is
// started there. spawn_process (process/spawn.hpp) wraps a program with it and applies the
// limits.

#include <cstdint>
#include <string>
#include <vector>

namespace bb {

/// evaluator.sandbox: "auto" sandboxes where bwrap works here and otherwise runs the program
/// bare (saying so); "required" refuses to run without; "off" never sandboxes.
enum class sandbox_mode { automatic, required, off };

/// "auto", "required" or "off".
std::string to_string(sandbox_mode m);

/// Parses "auto", "required" or "off"; false for anything else.
bool from_string(const std::string& text, sandbox_mode& out);

/// Resource limits of a sandboxed program (setrlimit); 0 leaves one as it is. Core dumps are
/// always off. They hold even where namespaces are not available (sandbox = "auto").
struct sandbox_limits {
  /// RLIMIT_NPROC: processes and threads of the program's user (a fork bomb stops there).
  uint64_t max_processes = 0;
  /// RLIMIT_FSIZE: the largest file it may write, its log included.
  uint64_t max_file_bytes = 0;
  /// RLIMIT_NOFILE.
  uint64_t max_open_files = 0;
  /// RLIMIT_DATA: its private writable memory.
  uint64_t max_data_bytes = 0;
};

/// What a sandboxed program may see and use. Paths are absolute.
struct sandbox_policy {
  sandbox_mode mode = sandbox_mode::off;
  /// Folders replaced by an empty read-only folder: the home, the CURVE keys, the run folder,
  /// the kernel cache.
  std::vector<std::string> hidden;
  /// Shown read-only even inside a hidden folder: the Python environment, the program's own
  /// folder, the kernel cache's built objects.
  std::vector<std::string> read_only;
  /// Shown writable (a compiler's private build folder).
  std::vector<std::string> writable;
  /// An empty writable folder of at most `tmp_bytes` at this path (a runner's scratch root,
  /// where its jobs' working folders go); "" for none.
  std::string scratch;
  /// Size of the private /tmp, and of the scratch folder.
  uint64_t tmp_bytes = 1ull << 30;
  /// Device nodes passed through (a GPU slot's /dev/nvidiaN, nvidiactl, nvidia-uvm).
  std::vector<std::string> devices;
  /// The user a program started by root runs as inside (RLIMIT_NPROC does not hold root).
  uint32_t unprivileged_uid = 65534;
  sandbox_limits limits;
};

/// bwrap's command line that runs `argv` under `p`: `bwrap` is the bwrap program, `as_root`
/// whether the caller is root (then the program drops to `p.unprivileged_uid` through
/// `setpriv`). Inherited descriptors stay open in the sandbox. Pure: nothing is started.
std::vector<std::string> sandbox_command(const sandbox_policy& p, const std::vector<std::string>& argv,
                                         const std::string& bwrap, bool as_root);

/// Whether a sandboxed program can run here: "" when it can, else why not (no bwrap, no user
/// namespaces, ...). Tries bwrap once per process and remembers the answer.
std::string sandbox_unavailable();

/// The bwrap program found in PATH ("" when there is none).
std::string bwrap_program();

/// How one program start is sandboxed, decided from the policy's mode and this machine.
struct sandbox_decision {
  /// Wrap the program with sandbox_command.
  bool wrap = false;
  /// For provenance and reports: "namespaces", "off", or "none: <why>" (auto without them).
  std::string label;
  /// Set when the mode is "required" and the sandbox cannot run here: the program must not
  /// start.
  std::string refusal;
};

sandbox_decision decide_sandbox(sandbox_mode mode);

/// The device nodes a GPU slot needs: /dev/nvidia<gpu> with nvidiactl, nvidia-uvm,
/// nvidia-uvm-tools and nvidia-modeset, those of them that exist under `dev`. Every GPU node
/// when `gpu` is not a number or has no node of that number (a container's one GPU may be
/// /dev/nvidia3).
std::vector<std::string> gpu_device_nodes(const std::string& gpu, const std::string& dev = "/dev");

/// Every GPU device node under `dev` (a compiler asking nvcc for the GPU's arch).
std::vector<std::string> all_gpu_device_nodes(const std::string& dev = "/dev");

/// Folders every sandbox hides: $HOME, /root and /home.
std::vector<std::string> default_hidden_folders();

/// The Python environment of the build (`python`: its executable): the venv's folder and the
/// base installation's, both read-only in a sandbox.
std::vector<std::string> python_environment_folders(const std::string& python);

/// A program that died by signal N inside bwrap is reported by bwrap as exit status 128 + N:
/// the description of the wait status as if the program had been waited for directly.
std::string describe_sandboxed_status(int wait_status);

} // namespace bb
