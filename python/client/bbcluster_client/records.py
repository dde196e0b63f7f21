"""Results as the server sends them: BackendBench's per-input records, one operator's terminal
record, and a whole request's scores. The fields are those of the journal's `job_finished`
lines (results.jsonl) and of BackendBench's records in full_results.json; fields this version
does not know are kept in `extra`, so a newer server does not break an older client."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

# Outcomes that leave an input (or a whole operator) out of the scores: nothing can be said
# about the kernel there (messages/outcome.hpp, is_skipped).
SKIPPED_OUTCOMES = frozenset({"reference_error", "unsupported", "needs_cuda"})


def _from_record(cls, record: Mapping[str, Any]):
    known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    return cls(**{k: v for k, v in record.items() if k in known},
               extra={k: v for k, v in record.items() if k not in known})


def geomean(values: List[float]) -> float:
    """Geometric mean; 1.0 for no values, as the server scores an operator without timings."""
    if not values:
        return 1.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass
class CorrectnessResult:
    """BackendBench's CorrectnessTestResult: one input's comparison with the reference."""

    op_name: str = ""
    args: str = ""
    is_correct: bool = False
    error_msg: str = ""
    error_type: str = ""
    traceback: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    test_type: str = "correctness"
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "CorrectnessResult":
        return _from_record(cls, record)

    @property
    def skipped(self) -> bool:
        """The reference failed on this input, or this torch cannot run it: not the kernel's
        verdict, and left out of the scores."""
        return not self.is_correct and self.error_type in SKIPPED_OUTCOMES


@dataclass
class PerformanceResult:
    """BackendBench's PerformanceTestResult, with bbcluster's timing fields (the speedup's 95%
    interval, the timing rounds, the timer, and whether the reference-time cache had a figure:
    then the reference was calibrated in this run, and reference_drift is its figure over the
    cached one, less 1)."""

    op_name: str = ""
    args: str = ""
    speedup: float = 0.0
    benchmark_time_ms: float = 0.0
    reference_time_ms: float = 0.0
    error_msg: str = ""
    successfully_ran: bool = False
    test_type: str = "performance"
    speedup_ci_low: float = 0.0
    speedup_ci_high: float = 0.0
    timing_rounds: int = 0
    reference_cached: bool = False
    reference_drift: float = 0.0
    reference_round_means_ms: List[float] = field(default_factory=list)
    unverified_speedup: float = 0.0
    timer: str = ""
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "PerformanceResult":
        return _from_record(cls, record)

    @property
    def skipped(self) -> bool:
        """Left out of the scores: the error names a skipped outcome ("reference_error: ...")."""
        return (not self.successfully_ran
                and self.error_msg.split(":", 1)[0] in SKIPPED_OUTCOMES)


@dataclass
class InputResult:
    """One input's records as the server streamed them when the input ended (the `input`
    message): progress, not the verdict. The operator's Result supersedes it: timed calls
    found wrong later mark the same input's correctness record incorrect, a job that fails as
    a whole fails every input, and a retried attempt streams its inputs again (`attempt`).
    `input` is the input's index among its operator's; `correctness` and `performance` are
    its records (either may be None)."""

    op_name: str
    input: int
    attempt: int
    correctness: Optional[CorrectnessResult]
    performance: Optional[PerformanceResult]

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> "InputResult":
        c = message.get("correctness")
        p = message.get("performance")
        return cls(op_name=message.get("op_name", ""), input=int(message.get("input", 0)),
                   attempt=int(message.get("attempt", 0)),
                   correctness=CorrectnessResult.from_record(c) if c else None,
                   performance=PerformanceResult.from_record(p) if p else None)


@dataclass
class Result:
    """One operator's terminal record. `outcome` is "ok" when every input was evaluated (each
    input then carries its own verdict), otherwise why the job failed as a whole (exception,
    compile_failed, crashed, timed_out, oom, needs_cuda, ...); `detail` says more. `where` is
    where it was measured (node, device, torch_version, settings, ...). `raw` is the record as
    it came."""

    op_name: str
    outcome: str
    detail: str
    flags: List[str]
    correctness: List[CorrectnessResult]
    performance: List[PerformanceResult]
    where: Dict[str, Any]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "Result":
        return cls(
            op_name=record.get("op_name", ""),
            outcome=record.get("outcome", ""),
            detail=record.get("detail", ""),
            flags=list(record.get("flags", [])),
            correctness=[CorrectnessResult.from_record(c) for c in record.get("correctness", [])],
            performance=[PerformanceResult.from_record(p) for p in record.get("performance", [])],
            # The wire's eval_result calls it `where`; the journal writes it as `provenance`.
            where=dict(record.get("where", record.get("provenance", {}))),
            raw=dict(record),
        )

    @property
    def skipped(self) -> bool:
        """Nothing could be said about the kernel: the job's outcome is a skipped one, or the
        reference failed on every input. Such an operator is left out of the scores."""
        if self.outcome in SKIPPED_OUTCOMES:
            return True
        return bool(self.correctness) and all(c.skipped for c in self.correctness)

    @property
    def correct(self) -> bool:
        """Every scorable correctness input passed, and there was at least one (the server's
        rule, results/scoring.cpp)."""
        if self.outcome in SKIPPED_OUTCOMES:
            return False
        scorable = [c for c in self.correctness if not c.skipped]
        return bool(scorable) and all(c.is_correct for c in scorable)

    @property
    def speedup(self) -> float:
        """Geometric mean of the scorable performance inputs' speedups; an input that failed
        counts 1.0, and no inputs give 1.0 (the server's rule, results/scoring.cpp)."""
        return geomean([p.speedup if p.successfully_ran and p.speedup > 0.0 else 1.0
                        for p in self.performance if not p.skipped])


@dataclass
class SweepResult:
    """A request's results, one per operator selected, in the order they finished, with the
    server's scores (`correctness`, `performance`, `perf_at_p`, `perf_at_p_significant`) and
    BackendBench's score lines. `folder` is the request's run folder on the server. A cancelled
    request has the results that finished before it was. `problems` lists kernel folders a
    directory sweep could not use (they were not sent)."""

    request_id: str
    results: List[Result]
    scores: Dict[str, float]
    scores_text: str
    folder: str
    cancelled: bool
    ops: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)

    @property
    def by_op(self) -> Dict[str, Result]:
        return {r.op_name: r for r in self.results}

    def result(self, op_name: str) -> Optional[Result]:
        """The result of an operator by its full name (aten.relu.default) or any name that
        selects only it (relu.default, relu)."""
        matches = [r for r in self.results if _selects(op_name, r.op_name)]
        return matches[0] if len(matches) == 1 else None


def _selects(token: str, op_name: str) -> bool:
    # The --ops rule (suite/ops.hpp, matches): the full name, without "aten.", or the base name.
    rest = op_name[5:] if op_name.startswith("aten.") else op_name
    return token in (op_name, rest, rest.split(".", 1)[0])
