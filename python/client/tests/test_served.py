"""The client against a real `bbcluster serve` of local CPU slots running bbrunner.

Needs the built programs: BBCLUSTER_BIN names their folder (ctest sets it). Each test starts
its own server in a folder of its own and stops it with SIGTERM.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import msgpack
import zmq

from bbcluster_client import BBClusterError, Client, RequestCancelled, ServerError, Timeout

BIN = os.environ.get("BBCLUSTER_BIN", "")

HONEST = """
import torch
def relu_kernel_impl(x):
    return torch.clamp(x, min=0)
"""

WRONG = """
import torch
def relu_kernel_impl(x):
    return torch.clamp(x, min=0) * 2
"""

# Ends its runner: the job is the kernel's crash, retried once, and nobody else's.
CRASHING = """
import os
def relu_kernel_impl(x):
    os.abort()
"""

# About 0.05 s a call: a request of it holds its slot for a second or more.
SLOW = """
import time, torch
def relu_kernel_impl(x):
    time.sleep(0.05)
    return torch.clamp(x, min=0)
"""

# The server's smoke suite on the CPU with a short timer: a request is about a second.
QUICK = {"timing.cpu_runs": 5, "timing.cpu_warmup": 1}


class Server:
    def __init__(self, *flags, folder=None):
        # A folder given is a killed server's: this one takes up its requests.
        self.dir = folder or tempfile.mkdtemp(prefix="bbserve-")
        self.run_dir = os.path.join(self.dir, "run")
        if os.path.exists(os.path.join(self.run_dir, "endpoint")):
            os.remove(os.path.join(self.run_dir, "endpoint"))
        self.err = open(os.path.join(self.dir, "serve.err"), "a")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "bbcluster"), "serve", "--listen", "tcp://127.0.0.1:0", "--log-dir",
             self.run_dir, *flags], stdout=self.err, stderr=subprocess.STDOUT)
        endpoint = os.path.join(self.run_dir, "endpoint")
        deadline = time.time() + 60
        self.address = ""
        while not self.address:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("bbcluster serve did not start: " + self.log())
            time.sleep(0.05)
            if os.path.exists(endpoint):
                with open(endpoint) as f:
                    self.address = f.read().strip()

    def log(self):
        self.err.flush()
        with open(os.path.join(self.dir, "serve.err")) as f:
            return f.read()[-4000:]

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.err.close()

    def stop(self):
        if self.err.closed:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipUnless(BIN and os.path.exists(os.path.join(BIN, "bbcluster")),
                     "BBCLUSTER_BIN does not name a folder with bbcluster (ctest sets it)")
class ServedTest(unittest.TestCase):
    def start(self, *flags):
        server = Server(*flags)
        self.addCleanup(server.stop)
        return server

    def test_honest_wrong_and_aten_kernels_and_refusals(self):
        server = self.start("--devices", "1")
        with Client(server.address, name="one") as c:
            self.assertEqual(c.welcome["slots"], 1)
            honest = c.evaluate("relu", HONEST, suite="smoke", settings=QUICK)
            self.assertEqual(honest.op_name, "aten.relu.default")
            self.assertEqual(honest.outcome, "ok")
            self.assertTrue(honest.correct, honest.raw)
            self.assertEqual(len(honest.correctness), 1)  # the smoke suite: one input
            self.assertEqual(honest.flags, [])
            wrong = c.evaluate("relu", WRONG, suite="smoke", settings=QUICK)
            self.assertEqual(wrong.outcome, "ok")
            self.assertFalse(wrong.correct)
            self.assertFalse(wrong.correctness[0].is_correct)
            aten = c.evaluate("relu", None, kind="aten", suite="smoke", settings=QUICK)
            self.assertTrue(aten.correct)
            with self.assertRaises(ServerError) as e:
                c.evaluate("nosuchop", HONEST, suite="smoke")
            self.assertIn("nosuchop", str(e.exception))
            with self.assertRaises(ServerError) as e:
                c.evaluate("relu", "import torch\ndef relu(x):\n    return x\n", suite="smoke")
            self.assertIn("relu_kernel_impl", str(e.exception))
            with self.assertRaises(ServerError) as e:
                c.evaluate("relu", HONEST, suite="smoke", settings={"evaluator.devices": 4})
            self.assertIn("evaluator.devices", str(e.exception))
            sweep = c.sweep({"relu": HONEST}, suite="smoke", settings=QUICK)
            self.assertEqual(sweep.scores["correctness"], 1.0)
            self.assertIn("correctness score (mean pass rate over all operators): 1.00", sweep.scores_text)
            self.assertTrue(os.path.exists(os.path.join(sweep.folder, "full_results.json")))

    def test_each_input_streams_back_as_it_ends(self):
        server = self.start("--devices", "1")
        trace = os.path.join(server.dir, "relu.txt")
        with open(trace, "w") as f:
            f.write("Operator: aten.relu.default\n"
                    "cnt: 1, ((T([64], f32),), {})\ncnt: 1, ((T([128], f32),), {})\ncnt: 1, ((T([256], f32),), {})\n")
        with Client(server.address, name="streamed") as c:
            seen = []
            lock = threading.Lock()

            def on_input(record):
                with lock:
                    seen.append((time.time(), record))

            future = c.submit("relu", HONEST, data=trace, settings=QUICK, on_input=on_input)
            result = future.result(120)
            finished = time.time()
            self.assertTrue(result.correct, result.raw)
            self.assertEqual(len(result.correctness), 3)
            # One message per input, each with its checked and its timed record, all before
            # the operator's result; the callback saw what the future keeps.
            with lock:
                records = [r for _, r in seen]
                self.assertTrue(all(t <= finished for t, _ in seen))
            self.assertEqual(sorted(r.input for r in records), [0, 1, 2])
            self.assertEqual(records, future.inputs)
            for r in records:
                self.assertEqual(r.op_name, "aten.relu.default")
                self.assertEqual(r.attempt, 1)
                self.assertTrue(r.correctness.is_correct)
                self.assertTrue(r.performance.successfully_ran)
                self.assertEqual(r.correctness.args, result.correctness[r.input].args)
                self.assertEqual(r.performance.args, result.performance[r.input].args)
            # A kernel that takes all the runner's memory on import (exploit corpus kernel 30):
            # its input streams first as the reference's failure, then, confirmed on a fresh
            # runner without it, again as the kernel's.
            starving = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "kernels", "exploits",
                                    "asin__default", "asin__default_implementation_v1.py")
            with open(starving) as f:
                source = f.read().replace("asin__default_kernel_impl", "asin_kernel_impl")
            asin = os.path.join(server.dir, "asin.txt")
            with open(asin, "w") as f:
                f.write("Operator: aten.asin.default\ncnt: 1, ((T([512, 512], f32),), {})\n")
            starved = c.submit("asin", source, kind="py", data=asin, settings=QUICK)
            verdict = starved.result(120)
            self.assertEqual(verdict.flags, ["starves_reference"], verdict.raw)
            self.assertEqual(verdict.correctness[0].error_type, "starves_reference")
            last = [r for r in starved.inputs if r.correctness is not None][-1]
            self.assertEqual(last.correctness.error_type, "starves_reference")
            # A wrong kernel's inputs stream as wrong.
            wrong = c.submit("relu", WRONG, data=trace, settings=QUICK)
            self.assertFalse(wrong.result(120).correct)
            self.assertEqual(len(wrong.inputs), 3)
            self.assertFalse(any(r.correctness.is_correct for r in wrong.inputs))

    def test_a_request_read_for_seconds_holds_up_no_other_message(self):
        server = self.start("--devices", "1")
        # A trace of a million relu inputs: the server reads it for seconds.
        trace = os.path.join(server.dir, "large.txt")
        with open(trace, "w") as f:
            f.write("Operator: aten.relu.default\n")
            f.writelines(f"cnt: 1, ((T([{i % 997 + 1}, {i % 13 + 1}], f32),), {{}})\n" for i in range(1000000))
        with Client(server.address, name="large") as large, Client(server.address, name="other") as other:
            started = time.time()
            future = large.submit("relu", None, kind="aten", data=trace, topn=1, settings=QUICK)
            time.sleep(0.05)
            status = other.status()
            answered = time.time() - started
            # The request is the client's from the moment it came, while it is being read.
            self.assertEqual(sum(status["requests"].values()), 1, status)
            self.assertTrue(other.evaluate("relu", HONEST, suite="smoke", settings=QUICK).correct)
            self.assertTrue(future.result(120).correct)
            finished = time.time() - started
            # Read on the socket's thread, the status would have waited for the whole trace.
            self.assertLess(answered, finished / 3, (answered, finished))
            # Cancelled while it is read: it ends at once and never starts.
            cancelled = large.submit("relu", None, kind="aten", data=trace, topn=1, settings=QUICK)
            time.sleep(0.05)
            large.cancel(cancelled)
            with self.assertRaises(RequestCancelled):
                cancelled.result(finished / 3)
            self.assertEqual(sum(large.status()["requests"].values()), 0)
        # Cancelled while read and sent again under the same id: the second is the one that runs.
        raw = zmq.Context.instance().socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.setsockopt(zmq.RCVTIMEO, 60000)
        raw.connect(server.address)
        raw.send(msgpack.packb({"kind": "hello", "proto": 1, "client": "again"}))
        self.assertEqual(msgpack.unpackb(raw.recv())["kind"], "welcome")
        quick = {k: str(v) for k, v in QUICK.items()}
        raw.send(msgpack.packb({"kind": "evaluate", "id": "x", "kernels": {"relu": {"kind": "aten"}}, "data": trace,
                                "topn": 1, "settings": quick}))
        raw.send(msgpack.packb({"kind": "cancel", "id": "x"}))
        raw.send(msgpack.packb({"kind": "evaluate", "id": "x", "kernels": {"relu": {"kind": "py", "source": HONEST}},
                                "suite": "smoke", "settings": quick}))
        kinds = []
        while not (kinds and kinds[-1][0] == "done" and not kinds[-1][1]):
            m = msgpack.unpackb(raw.recv())
            if m["kind"] != "input":  # each input's progress, as it ends
                kinds.append((m["kind"], m.get("cancelled", False),
                              m.get("result", {}).get("provenance", {}).get("artefact_hash")))
        self.assertEqual([k for k, _, _ in kinds], ["cancelled", "done", "accepted", "result", "done"], kinds)
        self.assertTrue(kinds[1][1])  # the first's end, cancelled
        self.assertNotEqual(kinds[3][2], "aten")  # the result is the second's kernel, not the first's aten
        raw.close()

    def test_submit_from_the_shell(self):
        server = self.start("--devices", "1")
        folder = os.path.join(server.dir, "kernels", "relu")
        os.makedirs(folder)
        with open(os.path.join(folder, "relu_implementation_v1.py"), "w") as f:
            f.write(HONEST)
        bbcluster = os.path.join(BIN, "bbcluster")
        sets = [w for k, v in QUICK.items() for w in ("--set", f"{k}={v}")]
        done = subprocess.run([bbcluster, "submit", os.path.dirname(folder), "--server", server.address, *sets],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("correctness score (mean pass rate over all operators): 1.00", done.stdout)
        self.assertIn("[1/1] aten.relu.default: 1/1 correct", done.stderr)
        refused = subprocess.run([bbcluster, "submit", os.path.join(folder, "relu_implementation_v1.py"), "--ops",
                                  "nosuchop", "--server", server.address], capture_output=True, text=True, timeout=60)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("refused: kernels: nosuchop selects none", refused.stderr)
        absent = subprocess.run([bbcluster, "submit", os.path.dirname(folder), "--server", "tcp://127.0.0.1:1", "--connect-timeout",
                                 "1"], capture_output=True, text=True, timeout=60)
        self.assertEqual(absent.returncode, 1)
        self.assertIn("no answer from tcp://127.0.0.1:1", absent.stderr)

    def test_a_crashing_kernel_ends_only_its_own_request(self):
        server = self.start("--devices", "2")
        with Client(server.address, name="crasher") as bad, Client(server.address, name="honest") as good:
            crashed = bad.submit("relu", CRASHING, suite="smoke", settings=QUICK)
            honest = [good.submit("relu", HONEST, suite="smoke", settings=QUICK) for _ in range(3)]
            self.assertEqual(crashed.result(120).outcome, "crashed")
            for f in honest:
                self.assertTrue(f.result(120).correct)
            # The crasher's client goes on being served.
            self.assertTrue(bad.evaluate("relu", HONEST, suite="smoke", settings=QUICK).correct)

    def test_cancel_bye_and_silence_drop_a_clients_queued_jobs(self):
        server = self.start("--devices", "1", "--set", "serve.client_timeout_s=2")
        with Client(server.address, name="watcher") as watcher:
            # Cancel: the request ends at once, marked cancelled.
            with Client(server.address, name="canceller") as c:
                futures = [c.submit("relu", SLOW, suite="smoke", settings=QUICK) for _ in range(4)]
                time.sleep(0.5)
                for f in futures:
                    c.cancel(f)
                cancelled = 0
                for f in futures:
                    try:
                        self.assertTrue(f.result(60).correct)  # it had finished before its cancel
                    except RequestCancelled:
                        cancelled += 1
                # One slot: at most the first had run by then.
                self.assertGreaterEqual(cancelled, 3)
            # Bye: a client that leaves takes its queued jobs with it.
            leaver = Client(server.address, name="leaver")
            for _ in range(6):
                leaver.submit("relu", SLOW, suite="smoke", settings=QUICK)
            time.sleep(0.5)
            leaver.close()
            self.assert_drained(watcher, "leaver")
            # Silence: a client that vanishes without a word is dropped after serve.client_timeout_s.
            ctx = zmq.Context.instance()
            raw = ctx.socket(zmq.DEALER)
            raw.setsockopt(zmq.LINGER, 0)
            raw.connect(server.address)
            raw.send(msgpack.packb({"kind": "hello", "proto": 1, "client": "vanisher"}))
            self.assertEqual(msgpack.unpackb(raw.recv())["kind"], "welcome")
            for i in range(6):
                raw.send(msgpack.packb({"kind": "evaluate", "id": str(i), "kernels": {"relu": {"kind": "py", "source": SLOW}},
                                        "suite": "smoke", "settings": {k: str(v) for k, v in QUICK.items()}}))
            time.sleep(0.3)
            raw.close()
            self.assert_drained(watcher, "vanisher", within=20)
            # The slot is free for the others at once.
            started = time.time()
            self.assertTrue(watcher.evaluate("relu", HONEST, suite="smoke", settings=QUICK).correct)
            self.assertLess(time.time() - started, 15)

    def test_bad_messages_are_refused_and_a_forgotten_client_is_told(self):
        server = self.start("--devices", "1", "--set", "serve.client_timeout_s=2")
        ctx = zmq.Context.instance()
        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.setsockopt(zmq.RCVTIMEO, 10000)
        raw.connect(server.address)

        def ask(frame):
            raw.send(frame)
            return msgpack.unpackb(raw.recv())

        self.assertEqual(ask(msgpack.packb({"kind": "hello", "proto": "1"}))["kind"], "error")
        self.assertEqual(ask(b"\x91" * 100000 + b"\xc0")["kind"], "error")  # nested 100,000 deep
        self.assertEqual(ask(b"not msgpack at all")["kind"], "error")
        self.assertEqual(ask(msgpack.packb({"kind": "hello", "proto": 1, "client": "raw"}))["kind"], "welcome")
        bad_id = ask(msgpack.packb({"kind": "evaluate", "id": 5, "kernels": {"relu": {"source": HONEST}}}))
        self.assertEqual(bad_id["kind"], "error")
        self.assertIn("'id'", bad_id["why"])
        self.assertEqual(ask(msgpack.packb({"kind": "cancel", "id": ["x"]}))["kind"], "error")
        self.assertEqual(ask(msgpack.packb({"kind": "status"}))["kind"], "status")
        # Silent past serve.client_timeout_s: forgotten, and told so when it speaks again.
        time.sleep(3.5)
        forgotten = ask(msgpack.packb({"kind": "ping"}))
        self.assertEqual(forgotten["kind"], "error")
        self.assertTrue(forgotten.get("unknown_client"))
        raw.close()
        # The server is still up for others.
        with Client(server.address, name="after") as c:
            self.assertTrue(c.evaluate("relu", HONEST, suite="smoke", settings=QUICK).correct)

    def test_a_killed_server_restarted_on_its_folder_finishes_what_it_had_accepted(self):
        first = Server("--devices", "1")
        self.addCleanup(lambda: shutil.rmtree(first.dir, ignore_errors=True))
        client = Client(first.address, name="persistent")
        futures = [client.submit("relu", SLOW, suite="smoke", settings=QUICK) for _ in range(3)]
        ids = [f.request_id for f in futures]
        self.assertTrue(futures[0].result(120).correct)
        first.kill()  # SIGKILL: nothing of it is told; two requests were accepted and unfinished
        client.close()
        again = Server("--devices", "1", folder=first.dir)
        self.addCleanup(again.stop)
        self.assertIn("taken up again after a restart", again.log())
        with Client(again.address, name="persistent") as c:
            for request_id in ids:
                result = c.resume(request_id, timeout=120)
                self.assertEqual(len(result.results), 1, request_id)
                self.assertTrue(result.results[0].correct)
                self.assertEqual(result.scores["correctness"], 1.0)
            with self.assertRaises(ServerError):
                c.resume("no-such-request", timeout=30)
        with Client(again.address, name="someone-else") as other:
            with self.assertRaises(ServerError):
                other.resume(ids[1], timeout=30)

    def test_a_request_taken_up_with_resume_outlives_the_connection_that_sent_it(self):
        server = self.start("--devices", "1")
        first = Client(server.address, name="worker")
        futures = [first.submit("relu", SLOW, suite="smoke", settings=QUICK) for _ in range(3)]
        with Client(server.address, name="worker") as second:
            taken = second.submit_resume(futures[2].request_id)
            with self.assertRaises(BBClusterError):
                second.resume(futures[2].request_id, timeout=30)  # already waited for here
            # Its status is answered after its resume (one connection's messages keep their
            # order): the request is the second connection's before the first says bye.
            self.assertEqual(second.status()["requests"].get(second.welcome["client"]), 1)
            first.close()  # bye: cancels what is still the first connection's, not what was taken up
            result = taken.result(120)
            self.assertFalse(result.cancelled)
            self.assertEqual(len(result.results), 1)
            self.assertTrue(result.results[0].correct)
            status = second.status()
            self.assertEqual(status["requests"].get(second.welcome["client"], 0), 0)

    def test_over_two_local_nodes_a_lost_node_costs_only_a_retry(self):
        folder = tempfile.mkdtemp(prefix="bbserve-nodes-")
        self.addCleanup(shutil.rmtree, folder, True)
        hosts = os.path.join(folder, "hosts.txt")
        with open(hosts, "w") as f:
            f.write("node-a slots=1\nnode-b slots=1\n")
        server = self.start("--nodes", hosts, "--launcher", "local")
        with Client(server.address, name="remote") as c:
            self.assertEqual(c.welcome["slots"], 2)
            self.assertEqual(sorted(n["name"] for n in c.status()["nodes"]), ["node-a", "node-b"])
            streamed = []
            futures = [c.submit("relu", SLOW, suite="smoke", settings=QUICK, on_input=streamed.append)
                       for _ in range(6)]
            time.sleep(1.0)
            with open(os.path.join(server.run_dir, "nodes", "node-a.pid")) as f:
                node_a = int(f.read().split()[1])
            os.kill(node_a, signal.SIGKILL)
            nodes = set()
            for f in futures:
                r = f.result(180)
                self.assertTrue(r.correct, r.raw)
                nodes.add(r.where.get("node"))
                # Inputs stream from the nodes as from local slots (a retried job's again).
                self.assertTrue(any(i.correctness for i in f.inputs))
                self.assertTrue(any(i.performance for i in f.inputs))
                self.assertTrue(all(i.correctness.is_correct for i in f.inputs if i.correctness))
            self.assertIn("node-b", nodes)
            # The callbacks saw what the futures keep.
            self.assertEqual(len(streamed), sum(len(f.inputs) for f in futures))
        self.assertIn("node node-a: lost", server.log())

    def assert_drained(self, watcher, name, within=10):
        deadline = time.time() + within
        while True:
            status = watcher.status()
            queued = {k: v for k, v in status["queued"].items() if k.startswith(name + "#")}
            clients = [k for k in status["clients"] if k.startswith(name + "#")]
            if not queued and not clients:
                return
            if time.time() > deadline:
                self.fail(f"{name}'s jobs are still queued: {status}")
            time.sleep(0.2)

    def test_fair_share_serves_a_small_client_between_a_large_ones_jobs(self):
        server = self.start("--devices", "1")
        with Client(server.address, name="large") as large, Client(server.address, name="small") as small:
            finished = {}
            lock = threading.Lock()

            def mark(name, i):
                def done(_):
                    with lock:
                        finished[(name, i)] = time.time()
                return done

            many = []
            for i in range(12):
                f = large.submit("relu", SLOW, suite="smoke", settings=QUICK)
                f.add_done_callback(mark("large", i))
                many.append(f)
            time.sleep(0.3)
            few = []
            for i in range(2):
                f = small.submit("relu", SLOW, suite="smoke", settings=QUICK)
                f.add_done_callback(mark("small", i))
                few.append(f)
            for f in many + few:
                self.assertTrue(f.result(300).correct)
            large_times = sorted(t for (name, _), t in finished.items() if name == "large")
            small_last = max(t for (name, _), t in finished.items() if name == "small")
            # Round robin: the small client's two jobs go between the large one's, not after all twelve.
            self.assertLess(small_last, large_times[6], finished)


@unittest.skipUnless(BIN and os.path.exists(os.path.join(BIN, "bbcluster")),
                     "BBCLUSTER_BIN does not name a folder with bbcluster (ctest sets it)")
@unittest.skipUnless(zmq.has("curve"), "this pyzmq's libzmq has no CURVE")
class CurveServedTest(unittest.TestCase):
    def test_only_the_coordinators_key_is_served(self):
        keys = tempfile.mkdtemp(prefix="bbkeys-")
        other = tempfile.mkdtemp(prefix="bbkeys-other-")
        self.addCleanup(shutil.rmtree, keys, True)
        self.addCleanup(shutil.rmtree, other, True)
        for d in (keys, other):
            subprocess.run([os.path.join(BIN, "bbcluster"), "keygen", d, "--force"], check=True,
                           stdout=subprocess.DEVNULL)
        server = Server("--devices", "1", "--keys", keys)
        self.addCleanup(server.stop)
        with Client(server.address, keys=keys, name="trusted") as c:
            self.assertTrue(c.evaluate("relu", HONEST, suite="smoke", settings=QUICK).correct)
        # Another folder's keys: the server's public key differs too, so give the right one.
        shutil.copy(os.path.join(keys, "node.pub"), os.path.join(other, "node.pub"))
        with self.assertRaises(Timeout):
            Client(server.address, keys=other, name="stranger", timeout=3)
        self.assertIn("whose key is not the coordinator's", server.log())


if __name__ == "__main__":
    unittest.main()
