"""The one exception type whose message is shown to users as a one-line error."""


class PardecError(Exception):
    """Bad input or environment: the CLI prints `error: <message>` and exits non-zero."""
