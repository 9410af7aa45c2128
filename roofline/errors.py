"""One exception type for everything a user can get wrong; the CLI prints it as one line."""


class RooflineError(Exception):
    """Bad input or an unreachable source: shown to the user as `error: <message>`, exit 1."""
