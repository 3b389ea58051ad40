"""Runs one module of rdma-core's Python test suite and records each test's outcome.

Used by scripts/pyverbs-suite.sh, under `softib run`:

    python3 pyverbs_runner.py TESTS_DIR MODULE RESULTS [EXCLUDE]

TESTS_DIR is an unzipped copy of rdma-core's tests/ (Debian: /usr/share/doc/rdma-core/tests),
MODULE a module name in it (test_qp). The package is loaded as rdma-core's run_tests.py loads
it (its __init__ imports every test module; args_parser reads no argument here), then the
module's tests run with unittest. Each test appends lines to RESULTS as it goes, flushed at
once, so that a test that never returns is known by its START line:

    START <id>
    <ok|FAIL|ERROR|skip|xfail|xpass> <id> [<one-line reason>]

Test ids listed in the file EXCLUDE (one per line) are not run: the suite script reruns a
module without the tests a timeout already accounted for.
"""

import os
import sys
import traceback
import unittest
from importlib.machinery import SourceFileLoader


def main():
    tests_dir, module, results = sys.argv[1:4]
    exclude = set()
    if len(sys.argv) > 4:
        with open(sys.argv[4]) as f:
            exclude = {line.strip() for line in f if line.strip()}
    tests_dir = os.path.abspath(tests_dir)
    sys.path[:0] = [tests_dir, os.path.dirname(tests_dir)]
    sys.argv = [sys.argv[0]]
    from args_parser import parser

    parser.parse_args()
    SourceFileLoader('tests', os.path.join(tests_dir, '__init__.py')).load_module()
    mod = sys.modules['tests.' + module]
    out = open(results, 'a', buffering=1)

    def emit(*words):
        line = ' '.join(str(w).replace('\n', ' ') for w in words)
        out.write(line.rstrip() + '\n')
        out.flush()

    def ident(test):
        # A class or module fixture's error is reported as "setUpClass (tests.x.C)".
        return test.id().replace(' ', '')

    def last_line(err):
        text = ''.join(traceback.format_exception_only(err[0], err[1])).strip()
        return text.splitlines()[-1] if text else err[0].__name__

    class Recorder(unittest.TextTestResult):
        def startTest(self, test):
            emit('START', ident(test))
            super().startTest(test)

        def addSuccess(self, test):
            super().addSuccess(test)
            emit('ok', ident(test))

        def addFailure(self, test, err):
            super().addFailure(test, err)
            emit('FAIL', ident(test), last_line(err))

        def addError(self, test, err):
            super().addError(test, err)
            emit('ERROR', ident(test), last_line(err))

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            emit('skip', ident(test), reason)

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            emit('xfail', ident(test), last_line(err))

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            emit('xpass', ident(test))

    def flatten(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from flatten(t)
            else:
                yield t

    loaded = unittest.defaultTestLoader.loadTestsFromModule(mod)
    suite = unittest.TestSuite(t for t in flatten(loaded) if t.id() not in exclude)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=Recorder)
    result = runner.run(suite)
    out.close()
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == '__main__':
    main()
