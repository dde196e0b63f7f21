"""Tests of bbcluster_client against an in-process fake of `bbcluster serve` (fake_server.py).

    python -m unittest discover -s python/client/tests
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import os
import shutil
import tempfile
import time
import unittest

import zmq

from bbcluster_client import (BBClusterError, Client, CorrectnessResult, Kernel,
                              PerformanceResult, RequestCancelled, Result, ServerError,
                              SweepResult, Timeout, kernel_of, read_key_file, scan_kernel_dir)
from bbcluster_client.kernels import folder_name_to_aten_name, folder_name_to_op_name
from fake_server import FakeServer, job_record

RELU_SOURCE = "def relu_kernel_impl(x):\n    return x.clamp_min(0)\n"

# A job_finished line of a real journal (results.jsonl), shortened: the reference failed on
# the operator's only input.
JOURNAL_LINE = json.loads(r'''{"attempt":1,"correctness":[{"args":"((T([6, 3, 352, 352], f16), T([6, 352, 352, 2], f16), 0, 0, False,), {})","error_msg":"the reference does not agree with itself on this input","error_type":"reference_error","is_correct":false,"max_abs_error":0.0,"max_rel_error":0.0,"op_name":"aten.grid_sampler_2d.default","test_type":"correctness","traceback":""}],"detail":"","event":"job_finished","flags":[],"job_id":1,"op_name":"aten.grid_sampler_2d.default","outcome":"ok","performance":[{"args":"((T([6, 3, 352, 352], f16), T([6, 352, 352, 2], f16), 0, 0, False,), {})","benchmark_time_ms":0.0,"error_msg":"reference_error: the reference does not agree with itself on this input","op_name":"aten.grid_sampler_2d.default","reference_cached":false,"reference_round_means_ms":[],"reference_time_ms":0.0,"speedup":1.0,"speedup_ci_high":0.0,"speedup_ci_low":0.0,"successfully_ran":false,"test_type":"performance","timer":"","timing_rounds":0,"unverified_speedup":0.0}],"phases":{"compare":0.209},"provenance":{"artefact_hash":"aten","device":"cpu","node":"local","slot":0,"torch_version":"2.11.0"},"runner_restarts":0,"wall_seconds":0.326}''')


def write_file(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


class RecordsTest(unittest.TestCase):
    def test_a_record_keeps_the_fields_it_does_not_know(self):
        record = job_record("aten.relu.default")
        result = Result.from_record(record)
        self.assertEqual(result.correctness[1].max_abs_error, 1e-7)
        self.assertEqual(result.correctness[1].extra, {"future_field": 3})
        self.assertEqual(result.correctness[0].extra, {})
        self.assertEqual(result.performance[0].reference_round_means_ms, [1.0, 1.0])
        self.assertEqual(result.raw["future_field"], {"nested": True})
        self.assertEqual(result.where["device"], "cpu")

    def test_correct_and_speedup_leave_out_what_the_reference_failed(self):
        result = Result.from_record(job_record("aten.relu.default"))
        self.assertTrue(result.correct)
        self.assertFalse(result.skipped)
        # 2.0 and a failed input counting 1.0; the reference_error input is left out.
        self.assertAlmostEqual(result.speedup, math.sqrt(2.0))

    def test_one_wrong_input_makes_the_operator_incorrect(self):
        record = job_record("aten.relu.default")
        record["correctness"][0]["is_correct"] = False
        record["correctness"][0]["error_type"] = "incorrect"
        self.assertFalse(Result.from_record(record).correct)

    def test_a_journal_line_parses(self):
        result = Result.from_record(JOURNAL_LINE)
        self.assertEqual(result.op_name, "aten.grid_sampler_2d.default")
        self.assertEqual(result.where["torch_version"], "2.11.0")
        self.assertIsInstance(result.correctness[0], CorrectnessResult)
        self.assertIsInstance(result.performance[0], PerformanceResult)
        self.assertTrue(result.correctness[0].skipped)
        self.assertTrue(result.performance[0].skipped)
        # Nothing could be said about the kernel: skipped, not correct, a neutral speedup.
        self.assertTrue(result.skipped)
        self.assertFalse(result.correct)
        self.assertEqual(result.speedup, 1.0)

    def test_a_failed_job_is_neither_correct_nor_skipped(self):
        result = Result.from_record({"op_name": "aten.relu.default", "outcome": "compile_failed",
                                     "detail": "nvcc: error", "correctness": [],
                                     "performance": []})
        self.assertFalse(result.correct)
        self.assertFalse(result.skipped)
        self.assertEqual(result.speedup, 1.0)


class KernelsTest(unittest.TestCase):
    def test_kernel_of(self):
        self.assertEqual(kernel_of(), Kernel("aten"))
        self.assertEqual(kernel_of(RELU_SOURCE), Kernel("py", RELU_SOURCE))
        self.assertEqual(kernel_of(RELU_SOURCE, "cpp").kind, "cpp")
        with tempfile.TemporaryDirectory() as tmp:
            path = write_file(os.path.join(tmp, "relu.cu"), "__global__ void k() {}\n")
            self.assertEqual(kernel_of(path), Kernel("cu", "__global__ void k() {}\n", "relu.cu"))
            self.assertEqual(kernel_of(path, "cpp").kind, "cpp")
            with self.assertRaisesRegex(ValueError, "extension"):
                kernel_of(write_file(os.path.join(tmp, "relu.txt"), "x"))
        with self.assertRaisesRegex(ValueError, "aten kernel has no source"):
            kernel_of(RELU_SOURCE, "aten")
        with self.assertRaisesRegex(ValueError, "kind 'rust'"):
            kernel_of(RELU_SOURCE, "rust")

    def test_message_is_the_wire_form(self):
        self.assertEqual(Kernel("aten").message(), {"kind": "aten"})
        self.assertEqual(Kernel("py", "x = 1", "relu.py").message(),
                         {"kind": "py", "source": "x = 1", "name": "relu.py"})
        self.assertEqual(Kernel("py", "def f(x): return x", entry="f").message(),
                         {"kind": "py", "source": "def f(x): return x", "entry": "f"})

    def test_folder_names(self):
        self.assertEqual(folder_name_to_op_name("add___Tensor"), "add_.Tensor")
        self.assertEqual(folder_name_to_op_name("_native_batch_norm"), "_native_batch_norm")
        self.assertEqual(folder_name_to_aten_name("add__Tensor"), "aten.add.Tensor")
        self.assertEqual(folder_name_to_aten_name("relu"), "aten.relu.default")

    def test_scan_follows_the_directory_layout(self):
        with tempfile.TemporaryDirectory() as tmp:
            write_file(os.path.join(tmp, "relu", "relu_implementation_v2.py"), "v2")
            write_file(os.path.join(tmp, "relu", "relu_implementation_v1.py"), "v1")
            write_file(os.path.join(tmp, "add__Tensor", "add__Tensor_implementation_v1.cu"), "c")
            write_file(os.path.join(tmp, "add__Tensor", "notes.py"), "not a kernel")
            write_file(os.path.join(tmp, "mul", "README.md"), "no kernel here")
            write_file(os.path.join(tmp, "agent_logs", "agent_logs_implementation_v1.py"), "x")
            write_file(os.path.join(tmp, "relu_session_1", "relu_session_1_implementation.py"), "x")
            write_file(os.path.join(tmp, ".cache", ".cache_implementation.py"), "x")
            kernels, problems = scan_kernel_dir(tmp)
        self.assertEqual(sorted(kernels), ["aten.add.Tensor", "aten.relu.default"])
        self.assertEqual(kernels["aten.relu.default"],
                         Kernel("py", "v1", os.path.join("relu", "relu_implementation_v1.py")))
        self.assertEqual(kernels["aten.add.Tensor"].kind, "cu")
        self.assertEqual(len(problems), 1)
        self.assertIn("mul: no implementation file", problems[0])

    def test_scan_of_a_missing_folder(self):
        with self.assertRaises(FileNotFoundError):
            scan_kernel_dir("/nonexistent/kernels")


class KeyFileTest(unittest.TestCase):
    def test_reads_the_keygen_format(self):
        public, secret = zmq.curve_keypair()
        with tempfile.TemporaryDirectory() as tmp:
            path = write_file(os.path.join(tmp, "coordinator.key"),
                              f"# bbcluster CURVE key (Z85)\npublic-key: {public.decode()}\n"
                              f"secret-key: {secret.decode()}\n")
            keys = read_key_file(path)
            self.assertEqual((keys.public_key, keys.secret_key), (public.decode(), secret.decode()))
            bad = write_file(os.path.join(tmp, "node.pub"),
                             f"# comment\n\npublic = {public.decode()}\n")
            with self.assertRaisesRegex(BBClusterError, r"node\.pub:3: expected 'public-key"):
                read_key_file(bad)
            short = write_file(os.path.join(tmp, "short.pub"), "public-key: abc\n")
            with self.assertRaisesRegex(BBClusterError, "40-character"):
                read_key_file(short)
            only_secret = write_file(os.path.join(tmp, "s.key"), f"secret-key: {secret.decode()}\n")
            with self.assertRaisesRegex(BBClusterError, "no public-key line"):
                read_key_file(only_secret)


class ServerTestCase(unittest.TestCase):
    """Starts a fake server per test; clients made with `connect` are closed after it."""

    server_options: dict = {}

    def setUp(self):
        self.server = FakeServer(**self.server_options)
        self.clients = []

    def tearDown(self):
        for client in self.clients:
            client.close()
        self.server.stop()

    def connect(self, **options) -> Client:
        options.setdefault("timeout", 5.0)
        client = Client(self.server.address, **options)
        self.clients.append(client)
        return client


class ClientTest(ServerTestCase):
    def test_evaluate_round_trip(self):
        client = self.connect(name="tester")
        self.assertEqual(client.welcome, {"proto": 1, "slots": 2, "device": "cpu",
                                          "version": "0.0-fake"})
        with tempfile.TemporaryDirectory() as tmp:
            path = write_file(os.path.join(tmp, "relu_kernel.py"), RELU_SOURCE)
            result = client.evaluate("relu", path, suite="smoke", data="/data/trace.txt",
                                     topn=3, settings={"timing.rounds": 3,
                                                       "checks.exploits": False})
        hello = self.server.messages("hello")[0]
        self.assertEqual(hello, {"kind": "hello", "proto": 1, "client": "tester"})
        request = self.server.messages("evaluate")[0]
        self.assertEqual(len(request["id"]), 32)
        self.assertEqual(request["kernels"], {"relu": {"kind": "py", "source": RELU_SOURCE,
                                                       "name": "relu_kernel.py"}})
        self.assertEqual((request["suite"], request["data"], request["topn"]),
                         ("smoke", "/data/trace.txt", 3))
        self.assertEqual(request["settings"], {"timing.rounds": "3", "checks.exploits": "false"})

        self.assertIsInstance(result, Result)
        self.assertEqual((result.op_name, result.outcome, result.detail, result.flags),
                         ("aten.relu.default", "ok", "", []))
        self.assertEqual(len(result.correctness), 3)
        first = result.correctness[0]
        self.assertEqual((first.op_name, first.args, first.is_correct, first.error_type,
                          first.test_type), ("aten.relu.default", "((T([4, 4], f32),), {})",
                                             True, "", "correctness"))
        timed = result.performance[0]
        self.assertEqual((timed.speedup, timed.benchmark_time_ms, timed.reference_time_ms,
                          timed.successfully_ran, timed.speedup_ci_low, timed.speedup_ci_high,
                          timed.timing_rounds, timed.reference_cached, timed.timer),
                         (2.0, 0.5, 1.0, True, 1.8, 2.2, 5, False, "cpu_bench"))
        self.assertEqual(result.performance[1].error_msg, "exception: RuntimeError: boom")
        self.assertTrue(result.correct)
        self.assertAlmostEqual(result.speedup, math.sqrt(2.0))
        self.assertEqual(result.raw["wall_seconds"], 0.25)

    def test_inputs_stream_before_the_result(self):
        client = self.connect()
        seen = []
        future = client.submit("relu", RELU_SOURCE, on_input=seen.append)
        result = future.result(5)
        self.assertTrue(result.correct)
        self.assertEqual(seen, future.inputs)
        self.assertEqual([(i.op_name, i.input, i.attempt) for i in future.inputs],
                         [("aten.relu.default", 0, 1), ("aten.relu.default", 1, 1)])
        first, second = future.inputs
        self.assertTrue(first.correctness.is_correct)
        self.assertEqual(first.performance.speedup, 2.0)
        self.assertFalse(second.correctness.is_correct)
        self.assertIsNone(second.performance)

    def test_the_operator_itself_travels_without_source(self):
        client = self.connect()
        self.assertEqual(client.evaluate("aten.mul.Tensor").op_name, "aten.mul.Tensor")
        self.assertEqual(self.server.messages("evaluate")[0]["kernels"],
                         {"aten.mul.Tensor": {"kind": "aten"}})

    def test_twenty_concurrent_submits_all_resolve(self):
        client = self.connect()
        ops = ["relu", "mul", "sum", "aten.add.Tensor"] * 5
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = list(pool.map(lambda op: client.submit(op, RELU_SOURCE), ops))
        done, not_done = concurrent.futures.wait(futures, timeout=10)
        self.assertEqual(len(done), 20)
        self.assertFalse(not_done)
        self.assertEqual(len({f.request_id for f in futures}), 20)
        for op, future in zip(ops, futures):
            self.assertTrue(future.result().op_name.endswith(
                {"relu": "relu.default", "mul": "mul.Tensor", "sum": "sum.default",
                 "aten.add.Tensor": "add.Tensor"}[op]))
        self.assertEqual(self.server.counts["evaluate"], 20)

    def test_evaluate_many_yields_every_result(self):
        client = self.connect()
        items = [("relu", RELU_SOURCE), {"op": "mul", "source": RELU_SOURCE},
                 ("sum", None, "aten")]
        results = list(client.evaluate_many(items, suite="smoke"))
        self.assertEqual(sorted(r.op_name for r in results),
                         ["aten.mul.Tensor", "aten.relu.default", "aten.sum.default"])
        self.assertEqual({m["suite"] for m in self.server.messages("evaluate")}, {"smoke"})

        outcomes = list(client.evaluate_many([("relu",), ("nosuchop",)], return_exceptions=True))
        self.assertEqual(sorted(type(o).__name__ for o in outcomes), ["Result", "ServerError"])
        with self.assertRaises(ServerError):
            list(client.evaluate_many([("nosuchop",)]))

    def test_server_error_raises_with_its_reason(self):
        client = self.connect()
        with self.assertRaises(ServerError) as caught:
            client.evaluate("nosuchop", RELU_SOURCE)
        self.assertEqual(caught.exception.why, "--ops nosuchop: no such operator in the suite")
        self.assertEqual(caught.exception.request_id, self.server.messages("evaluate")[0]["id"])
        self.assertIsInstance(caught.exception, BBClusterError)

    def test_a_name_that_selects_several_operators_is_refused_and_cancelled(self):
        client = self.connect()
        with self.assertRaisesRegex(BBClusterError, r"'add' selects 2 operators "
                                                    r"\(aten.add.Tensor, aten.add.Scalar\)"):
            client.evaluate("add", RELU_SOURCE)
        request_id = self.server.messages("evaluate")[0]["id"]
        self.assertEqual(self.server.wait_for("cancel")[0]["id"], request_id)

    def test_sweep_of_a_kernel_map(self):
        client = self.connect()
        sweep = client.sweep({"relu": RELU_SOURCE, "add": (RELU_SOURCE, "py"), "mul": None},
                             topn=1)
        self.assertIsInstance(sweep, SweepResult)
        self.assertFalse(sweep.cancelled)
        self.assertEqual(sweep.ops, ["aten.relu.default", "aten.add.Tensor", "aten.add.Scalar",
                                     "aten.mul.Tensor"])
        self.assertEqual(sorted(sweep.by_op), sorted(sweep.ops))
        self.assertEqual(sweep.scores["perf_at_p"], 1.0)
        self.assertTrue(sweep.scores_text.startswith("correctness score"))
        self.assertTrue(sweep.folder.endswith(sweep.request_id))
        self.assertEqual(sweep.result("relu").op_name, "aten.relu.default")
        self.assertIsNone(sweep.result("add"))
        kernels = self.server.messages("evaluate")[0]["kernels"]
        self.assertEqual(kernels["mul"], {"kind": "aten"})

    def test_sweep_of_a_kernel_directory(self):
        client = self.connect()
        with tempfile.TemporaryDirectory() as tmp:
            write_file(os.path.join(tmp, "relu", "relu_implementation_v1.py"), RELU_SOURCE)
            write_file(os.path.join(tmp, "add__Tensor", "add__Tensor_implementation_v1.py"), "x")
            os.makedirs(os.path.join(tmp, "sum"))
            sweep = client.sweep(tmp)
            with self.assertRaisesRegex(ValueError, "no operator folder holds a kernel"):
                client.sweep(os.path.join(tmp, "sum"))
        self.assertEqual(sorted(sweep.by_op), ["aten.add.Tensor", "aten.relu.default"])
        self.assertEqual(len(sweep.problems), 1)
        self.assertIn("sum: no implementation file", sweep.problems[0])
        kernels = self.server.messages("evaluate")[0]["kernels"]
        self.assertEqual(kernels["aten.relu.default"]["name"],
                         os.path.join("relu", "relu_implementation_v1.py"))

    def test_status(self):
        client = self.connect(name="tester")
        status = client.status()
        self.assertEqual(status, {"slots": 2, "busy": 0, "queued": {"tester": 0},
                                  "requests": {}, "clients": 1})

    def test_aevaluate(self):
        client = self.connect()
        result = asyncio.run(client.aevaluate("relu", RELU_SOURCE))
        self.assertEqual(result.op_name, "aten.relu.default")
        sweep = asyncio.run(client.asweep({"relu": RELU_SOURCE}))
        self.assertEqual(len(sweep.results), 1)

    def test_hello_with_no_server_times_out_naming_the_address(self):
        # Nothing listens on port 1; a DEALER connects lazily, so only the wait tells.
        with self.assertRaisesRegex(Timeout, r"no welcome from tcp://127.0.0.1:1 within 0.3 s"):
            Client("tcp://127.0.0.1:1", timeout=0.3)


class SlowServerTest(ServerTestCase):
    server_options = {"result_delay_s": 5.0}

    def test_pings_while_connected(self):
        client = self.connect()
        start = time.monotonic()
        result = client.evaluate("relu", RELU_SOURCE)
        self.assertGreaterEqual(time.monotonic() - start, 4.9)
        self.assertEqual(result.op_name, "aten.relu.default")
        # Every 2 s over 5 s: at 2 s and 4 s at least (one more when the first goes at once).
        self.assertGreaterEqual(self.server.counts["ping"], 2)
        self.assertLessEqual(self.server.counts["ping"], 4)
        pings = self.server.counts["ping"]
        # Idle too: a server forgets a client silent for serve.client_timeout_s.
        time.sleep(4.5)
        self.assertGreaterEqual(self.server.counts["ping"], pings + 2)

    def test_cancel(self):
        client = self.connect()
        future = client.submit("relu", RELU_SOURCE)
        self.server.wait_for("evaluate")
        self.assertTrue(client.cancel(future))
        with self.assertRaises(RequestCancelled) as caught:
            future.result(timeout=5)
        self.assertEqual(caught.exception.request_id, future.request_id)
        self.assertEqual(self.server.messages("cancel"), [{"kind": "cancel",
                                                           "id": future.request_id}])
        self.assertFalse(client.cancel(future), "cancelled a finished request")

    def test_a_cancelled_sweep_returns_what_finished(self):
        client = self.connect()
        future = client.submit_sweep({"relu": RELU_SOURCE, "mul": RELU_SOURCE})
        self.server.wait_for("evaluate")
        client.cancel(future.request_id)
        sweep = future.result(timeout=5)
        self.assertTrue(sweep.cancelled)
        self.assertEqual(sweep.results, [])

    def test_evaluate_timeout_cancels_the_request(self):
        client = self.connect()
        with self.assertRaisesRegex(Timeout, "did not finish within 0.5 s") as caught:
            client.evaluate("relu", RELU_SOURCE, timeout=0.5)
        self.assertIsInstance(caught.exception, TimeoutError)
        self.assertEqual(self.server.wait_for("cancel")[0]["id"],
                         self.server.messages("evaluate")[0]["id"])

    def test_close_sends_bye_and_fails_what_is_unfinished(self):
        with Client(self.server.address, timeout=5.0) as client:
            future = client.submit("relu", RELU_SOURCE)
        self.assertTrue(self.server.bye.wait(2.0))
        with self.assertRaisesRegex(BBClusterError, "closed"):
            future.result(timeout=2)
        with self.assertRaisesRegex(BBClusterError, "closed"):
            client.submit("relu", RELU_SOURCE)
        client.close()
        self.assertEqual(self.server.counts["bye"], 1)


class SilentServerTest(ServerTestCase):
    server_options = {"mute": True}

    def test_a_silent_server_fails_the_requests(self):
        client = self.connect(timeout=1.0)
        start = time.monotonic()
        with self.assertRaisesRegex(Timeout, "has not answered for"):
            client.evaluate("relu", RELU_SOURCE)
        self.assertLess(time.monotonic() - start, 3.0)
        with self.assertRaises(Timeout):
            client.status()


class RefusingServerTest(ServerTestCase):
    server_options = {"refuse_hello": "protocol 1 only"}

    def test_a_refused_hello_raises_the_reason(self):
        with self.assertRaises(ServerError) as caught:
            self.connect()
        self.assertEqual(caught.exception.why, "protocol 1 only")


def write_keys(folder: str, role: str, public: bytes, secret: bytes) -> None:
    # As `bbcluster keygen` writes them (cluster/curve_keys.cpp).
    header = "# bbcluster CURVE key (Z85)\n"
    write_file(os.path.join(folder, role + ".key"),
               f"{header}public-key: {public.decode()}\nsecret-key: {secret.decode()}\n")
    write_file(os.path.join(folder, role + ".pub"), f"{header}public-key: {public.decode()}\n")


@unittest.skipUnless(zmq.has("curve"), "this pyzmq's libzmq has no CURVE (built without "
                                       "libsodium)")
class CurveTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.keys = os.path.join(self.tmp.name, "keys")
        coordinator, node = zmq.curve_keypair(), zmq.curve_keypair()
        write_keys(self.keys, "coordinator", *coordinator)
        write_keys(self.keys, "node", *node)
        self.server = FakeServer(curve=(node[1], coordinator[0]))

    def tearDown(self):
        self.server.stop()
        self.tmp.cleanup()

    def test_the_coordinators_keys_are_admitted(self):
        with Client(self.server.address, keys=self.keys, timeout=5.0) as client:
            self.assertEqual(client.evaluate("relu", RELU_SOURCE).op_name, "aten.relu.default")
        self.assertEqual(self.server.refused_keys, 0)

    def test_other_keys_time_out_at_hello(self):
        other = os.path.join(self.tmp.name, "other")
        write_keys(other, "coordinator", *zmq.curve_keypair())
        shutil.copy(os.path.join(self.keys, "node.pub"), other)
        with self.assertRaisesRegex(Timeout, f"no welcome from {self.server.address} .*keys"):
            Client(self.server.address, keys=other, timeout=1.0)
        self.assertGreaterEqual(self.server.refused_keys, 1)
        self.assertEqual(self.server.messages("hello"), [])

    def test_no_keys_time_out_at_hello(self):
        with self.assertRaisesRegex(Timeout, "refuses clients without keys"):
            Client(self.server.address, timeout=1.0)

    def test_a_keys_folder_without_coordinator_key(self):
        with self.assertRaisesRegex(BBClusterError, "coordinator.key: cannot read"):
            Client(self.server.address, keys=self.tmp.name, timeout=1.0)


if __name__ == "__main__":
    unittest.main()
