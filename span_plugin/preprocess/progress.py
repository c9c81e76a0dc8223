"""Progress bars for long preprocessing: shown on a terminal, silent in logs.

``bar(total, desc)`` is a tqdm bar on stderr when stderr is a terminal, and a no-op
otherwise (a redirected log, CI, a pipe): logs get the one summary line each command
prints when it is done, never carriage-return noise.
"""

import sys


class _Silent:
    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass


def on_terminal():
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


def bar(total, desc, unit="B"):
    """A context manager with ``update(n)``: tqdm on a terminal, nothing elsewhere."""
    if not on_terminal():
        return _Silent()
    import shutil

    from tqdm import tqdm

    # A terminal that reports no width (0 columns) would get an empty bar.
    width = shutil.get_terminal_size((80, 24)).columns or 80
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False,
                file=sys.stderr, ncols=width)
