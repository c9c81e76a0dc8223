"""How the conversion commands run: outputs guarded, mistakes and stops in one line."""


def run_guarded(command, outputs, inputs, action, sealed=None):
    """``action()`` writing ``outputs`` ({flag: path}; never one of ``inputs``, nor inside
    one of ``sealed`` ({input flag: why}); one writer each:
    :func:`span_plugin.files.outputs.writing`), SIGTERM raised as an exception. Bad
    input (a file that is not a checkpoint, is damaged or holds an object outside the
    allow-list; a folder of another model), a full disk, SIGINT or SIGTERM: one line
    naming ``command``, exit 2 (130 for SIGINT), as every command of the package.
    Returns the exit status."""
    from span_plugin.convert.hf_source import ConversionError
    from span_plugin.convert.safe_load import CheckpointFileError
    from span_plugin.files.errors import BadInputError
    from span_plugin.files.outputs import writing
    from span_plugin.files.stops import Stopped, report, stop_on_sigterm
    from span_plugin.requires import absent

    try:
        with stop_on_sigterm(), writing(outputs, inputs, sealed=sealed):
            action()
    except (ConversionError, CheckpointFileError, OSError, BadInputError, KeyboardInterrupt,
            Stopped) as err:
        return report(command, err)
    except ImportError as err:  # the lean install: no fairseq, no transformers
        missing = absent(err)
        if missing is None:
            raise
        return report(command, missing)
    return 0
