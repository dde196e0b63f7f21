#pragma once

// Whether the machine code the timer relies on is still what it was before any kernel loaded.
//
// A kernel runs in the runner's process and can rewrite code there (ctypes: mprotect, then
// memmove over a function's first bytes): a detour of cudaEventElapsedTime that reports a
// microsecond, or of clock_gettime, fakes every time the timer reads, with no Python object
// replaced (pygpubench's "function detour" exploit). The guard keeps a hash of the functions
// the timer's readings pass through (the CUDA runtime's and driver's event and synchronisation
// functions, the C library's clocks, libstdc++'s steady_clock, the vDSO), checked before each
// reading of device times and after each timed CPU call; and, after a kernel loads and at the
// end of its job, of bbrunner's own code, with a look at /proc/self/maps for a file's code
// mapped writable. A finding is sticky: the job's inputs fail with `patches_code`.
//
// After every job the runner checks everything again and exits when anything changed, so a
// patch made after the job's last check (a destructor, a native thread) ends the runner
// before the next job, which is never blamed for it.
//
// Calls need not be patched to be redirected: every loaded object calls a shared library's
// function through its GOT, a table of addresses that is writable in a program linked without
// -z now. The guard reads each object's relocations at the baseline and watches every GOT entry
// of bbrunner (linked with -z now: all bound at its start; any function it calls may be on the
// timer's path: steady_clock::now, cudaEventElapsedTime, c10's device_synchronize, getrusage
// ...) and, in other objects, every entry for a listed function (libstdc++'s for clock_gettime,
// ...); an entry may change only to where the loader binds that function (lazy binding: the
// process's first definition, or one in the object's own scope, both found at the baseline),
// never elsewhere. Not closed: code the timer reaches that is not
// listed (functions inside those libraries that the listed ones call), pointers a library keeps
// in its own data (the CUDA runtime's table of driver functions, the C library's vDSO
// pointers), and a patch a native thread undoes between a check and a reading.

#include <string>
#include <vector>

namespace bb::runner {

/// Takes the guard's baseline before a job's kernel loads: the listed functions as they are
/// now (those not loaded are not watched), bbrunner's code, the vDSO. Once Python has started
/// since the last one, what is watched is checked first and only what is new is added (a
/// change a kernel made is never taken for the original).
void code_baseline();

/// The watched functions checked now (microseconds); a change found is kept (code_finding).
void check_timing_code();

/// Everything checked now: the functions, bbrunner's code, the vDSO, and /proc/self/maps for a
/// file's code mapped writable. A change found is kept.
void check_all_code();

/// The first change found since the process started ("" when none): what changed, by name.
std::string code_finding();

/// The names of what the guard watches (functions, then bbrunner's code and the vDSO, then the
/// GOT entries).
std::vector<std::string> code_watched();

} // namespace bb::runner
