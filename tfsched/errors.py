"""The one exception type that user-facing commands turn into a single error line."""


class TfschedError(Exception):
    """Bad input or an impossible request, described in one line.

    The message names the file (or setting) and what is wrong with it; the CLI prints it
    as ``Error: <message>`` and exits non-zero without a traceback.
    """
