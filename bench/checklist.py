"""What the bench scripts' CI checks share (bench/*_test.py, bench/deepspeed/*_test.py): a
counter of checks that prints each one as it runs and ends with 'N passed, N failed'. A check
that fails does not stop the others, so one run names every failure."""


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def __call__(self, ok, what):
        ok = bool(ok)
        print(("ok   " if ok else "FAIL ") + what)
        self.passed += ok
        self.failed += not ok

    def summary(self):
        """Prints the count line; returns the exit status: 1 when any check failed."""
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
