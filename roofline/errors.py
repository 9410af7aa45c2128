"""One exception type for everything a user can get wrong; the CLI prints it as one line."""


class RooflineError(Exception):
    """Bad input or an unreachable source: shown to the user as `error: <message>`, exit 1."""


class UsageMissing(RooflineError):
    """An argument the command needs and was not given, found out only after looking (doctor's MODEL
    when the server does not say where its checkpoint is): a usage error, exit 2, like click's."""

    exit_code = 2
