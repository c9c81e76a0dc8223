"""Files as a command writes them, the lowest layer: atomic writes and staged folders
(``atomic.py``), one writer per output by a lock and inputs never overwritten
(``outputs.py``), what ``span-export --force`` may replace (``exports.py``), SIGTERM
and faults as exceptions (``stops.py``), and the input errors every reader raises
(``errors.py``). Plain Python: no torch, no fairseq."""
