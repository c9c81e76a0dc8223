"""The errors of input that cannot be used, raised by every reader and writer; the
commands print them in one line, naming the file and the line."""


class BadInputError(ValueError):
    """Input that cannot be processed without losing alignment; names file and line."""


class NotAFileError(BadInputError):
    """A path read as a file that is a folder, a device, a FIFO or a socket."""
