"""Runs tests of the Python client for ctest: run.py MODULE[.CLASS] (test_client,
test_served.CurveServedTest). Exit 77, ctest's skip, when pyzmq or msgpack is missing or when
any of the tests skipped itself (each says why), so that nothing that did not run counts as
passed; else 0 when all passed, 1 when any failed."""

import faulthandler
import os
import sys
import unittest

# A test that hangs prints every thread's stack before ctest's timeout (600 s) kills it.
faulthandler.dump_traceback_later(420, exit=True)

missing = []
for module in ("zmq", "msgpack"):
    try:
        __import__(module)
    except ImportError:
        missing.append(module)
if missing:
    print("skipped: the Python client's dependencies are missing here: " + ", ".join(missing)
          + " (scripts/setup.sh installs pyzmq and msgpack)")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(here))
sys.path.insert(0, here)
suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
result = unittest.TextTestRunner(verbosity=2).run(suite)
if not result.wasSuccessful():
    sys.exit(1)
if result.testsRun == 0 or result.skipped:
    for test, why in result.skipped:
        print(f"skipped: {test.id()}: {why}")
    sys.exit(77)
sys.exit(0)
