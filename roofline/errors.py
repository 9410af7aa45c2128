"""One exception type for everything a user can get wrong; the CLI prints it as one line."""


class RooflineError(Exception):
    """Bad input or an unreachable source: shown to the user as `error: <message>`, exit 1."""


class UsageMissing(RooflineError):
    """An argument the command needs and was not given, found out only after looking (doctor's MODEL
    when the server does not say where its checkpoint is): a usage error, exit 2, like click's."""

    exit_code = 2


def unknown(what: str, given: str, known: dict[str, tuple[str, ...]]) -> RooflineError:
    """One line for a name not in a vocabulary (a hardware key, a format): the nearest names first
    (keys and aliases; a name the given one begins: nvfp4 -> nvfp4-w4a16, nvfp4-w4a4), then every key
    with its aliases."""
    import difflib

    wanted = given.lower()
    spelled = {name.lower(): key for key, aliases in known.items() for name in (key, *aliases)}
    near = [spelled[name] for name in spelled if name.startswith(wanted) and wanted]
    near += [spelled[name] for name in difflib.get_close_matches(wanted, list(spelled), n=3, cutoff=0.6)]
    near = list(dict.fromkeys(near))[:4]
    listing = ", ".join(key + (f" ({', '.join(known[key])})" if known[key] else "") for key in sorted(known))
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    return RooflineError(f"unknown {what} {given!r}; {hint}known: {listing}")
